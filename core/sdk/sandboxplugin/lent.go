package sandboxplugin

import (
	"context"
	"fmt"
	"time"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// Sandbox is one sandbox of a backend, bound to its id: what an
// environment is lent for an episode (envplugin.Sandbox is this type).
type Sandbox interface {
	ID() string
	Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error)
	ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error)
	WriteFile(ctx context.Context, path string, data []byte, mode uint32) error
	ListFiles(ctx context.Context, path string) ([]core.FileInfo, error)
}

// LentRunner runs op on the sandbox a lent call names, once it has checked
// that the caller may use it (by its lease, or the token the call
// carries), with a context that also ends when the lease does. A sandbox
// the caller may not use is an error wrapping core.ErrNotFound, whether or
// not it exists, so the wire tells an env nothing of other sandboxes.
type LentRunner func(ctx context.Context, id string, token []byte, op func(context.Context, Sandbox) error) error

// AnswerLent answers one call of the lent-sandbox wire (core/sdk/wire/frames) with
// run. The host's socket and a backend's both answer through it, so an env
// sees the same calls and errors on either.
func AnswerLent(ctx context.Context, c *rlhostpb.LentCall, run LentRunner) *rlhostpb.LentReply {
	var (
		rep *rlhostpb.LentReply
		err error
	)
	tok := c.GetToken()
	switch x := c.GetCall().(type) {
	case *rlhostpb.LentCall_Info:
		var r *rlhostpb.SandboxInfo
		err = run(ctx, x.Info.GetId(), tok, func(_ context.Context, sb Sandbox) error {
			r = &rlhostpb.SandboxInfo{Id: sb.ID()}
			return nil
		})
		rep = &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Info{Info: r}}
	case *rlhostpb.LentCall_Exec:
		var r *rlhostpb.ExecResult
		err = run(ctx, x.Exec.GetSandboxId(), tok, func(ctx context.Context, sb Sandbox) error {
			start := time.Now()
			res, err := sb.Exec(ctx, ToExecRequest(x.Exec))
			if err == nil {
				if res.Duration == 0 { // as the gRPC server fills it in
					res.Duration = time.Since(start)
				}
				r = FromExecResult(res)
			}
			return err
		})
		rep = &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Exec{Exec: r}}
	case *rlhostpb.LentCall_ReadFile:
		q := x.ReadFile
		var data []byte
		err = run(ctx, q.GetSandboxId(), tok, func(ctx context.Context, sb Sandbox) (err error) {
			data, err = sb.ReadFile(ctx, string(q.GetPath()), q.GetMaxBytes())
			return err
		})
		rep = &rlhostpb.LentReply{Result: &rlhostpb.LentReply_ReadFile{ReadFile: &rlhostpb.ReadFileResponse{Data: data}}}
	case *rlhostpb.LentCall_WriteFile:
		q := x.WriteFile
		err = run(ctx, q.GetSandboxId(), tok, func(ctx context.Context, sb Sandbox) error {
			return sb.WriteFile(ctx, string(q.GetPath()), q.GetData(), q.GetMode())
		})
		rep = &rlhostpb.LentReply{Result: &rlhostpb.LentReply_WriteFile{WriteFile: &rlhostpb.Empty{}}}
	case *rlhostpb.LentCall_ListFiles:
		q := x.ListFiles
		var fs *rlhostpb.ListFilesResponse
		err = run(ctx, q.GetSandboxId(), tok, func(ctx context.Context, sb Sandbox) error {
			files, err := sb.ListFiles(ctx, string(q.GetPath()))
			if err == nil {
				fs = FromFiles(files)
			}
			return err
		})
		rep = &rlhostpb.LentReply{Result: &rlhostpb.LentReply_ListFiles{ListFiles: fs}}
	default: // a call this side does not know (a newer plugin)
		err = fmt.Errorf("lent sandbox call %T: %w", x, core.ErrUnimplemented)
	}
	if err != nil {
		return &rlhostpb.LentReply{Result: &rlhostpb.LentReply_Error{Error: rlhostpb.ToLentError(err)}}
	}
	return rep
}
