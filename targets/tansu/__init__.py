"""Tansu (Rust, crate `tansu`) as a kipcheck target: built with cargo on first use."""
