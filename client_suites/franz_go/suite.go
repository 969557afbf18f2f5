// Package suite pins franz-go for kipcheck's client-suite runner: the build compiles the
// test binary of github.com/twmb/franz-go/pkg/kgo (its integration tests) with the versions
// this module's go.mod/go.sum fix (client_suites/franz_go/build.py).
package suite

import _ "github.com/twmb/franz-go/pkg/kgo"
