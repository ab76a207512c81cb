package pluginbase

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Recovering returns a copy of desc whose every method turns a panic in the
// plugin's code into an error for that call alone: the stack goes to
// logger as one entry, the caller gets codes.Internal naming the method and
// the panic value, and the plugin keeps serving its other calls. (A panic
// in a goroutine the plugin starts itself still ends the process.)
func Recovering(desc *grpc.ServiceDesc, logger hclog.Logger) *grpc.ServiceDesc {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		handler, method := m.Handler, desc.ServiceName+"/"+m.MethodName
		d.Methods[i] = grpc.MethodDesc{
			MethodName: m.MethodName,
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (resp any, err error) {
				defer func() {
					if r := recover(); r != nil {
						resp, err = nil, Panicked(logger, method, r)
					}
				}()
				return handler(srv, ctx, dec, ic)
			},
		}
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, s := range desc.Streams {
		handler, method := s.Handler, desc.ServiceName+"/"+s.StreamName
		s.Handler = func(srv any, stream grpc.ServerStream) (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = Panicked(logger, method, r)
				}
			}()
			return handler(srv, stream)
		}
		d.Streams[i] = s
	}
	return &d
}

// Panicked is the error a call to method fails with when the plugin's code
// panicked with r, after logging the stack: the same whichever wire the
// call came on (gRPC, or an env's episode socket).
func Panicked(logger hclog.Logger, method string, r any) error {
	// The stack is one multi-line value, so the host shows it as one block.
	logger.Error("recovered from a panic; the call fails, the plugin keeps serving",
		"method", method, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	return status.Errorf(codes.Internal, "plugin panicked in %s: %v (stack in the plugin's log)", method, r)
}
