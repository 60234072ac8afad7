module github.com/vccl-go/vccl

go 1.26.0

require (
	github.com/ebitengine/purego v0.10.2
	golang.org/x/sys v0.50.0
)
