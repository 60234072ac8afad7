// Package diagnosis judges the analyzer on fresh runs with real faults: it
// has testdata/scenarios/gen.sh run real VCCL jobs in network namespaces,
// each with a fault injected for real (a rank frozen or killed, a link rate
// limited, busy loops on every core, more ranks than cores), analyses their
// traces and scores the findings against what was injected: every culprit
// named with a right kind, nothing else named. The default run is one run
// of each scenario; VCCL_CORPUS_FULL=1 runs five of each fault and ten of
// each clean setup (the figures in docs/analyzer.md), and
// VCCL_CORPUS_REPORT=FILE writes the score as a markdown table.
// VCCL_CORPUS_KEEP=DIR keeps the runs there, and VCCL_CORPUS_SCORE=DIR
// scores runs kept before, with the analyzer as it is now.
package diagnosis
