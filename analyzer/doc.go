// Package analyzer diagnoses VCCL jobs from their flow telemetry.
package analyzer
