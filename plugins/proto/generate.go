// Package launcherpb holds the gRPC protocol of launcher plugins: the proto
// in launcher.proto and the Go code generated from it, committed so that a
// build needs no protoc. The plugins package translates between these
// messages and the launcher contract; nothing else should import this one.
//
// Regenerating needs protoc (Debian: protobuf-compiler) and the two Go
// generators on PATH:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
package launcherpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative launcher.proto
