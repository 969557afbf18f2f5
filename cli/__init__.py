"""The kipcheck command-line application (top floor): every subcommand's entry point."""
