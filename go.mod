module github.com/vccl-go/vccl

go 1.26
