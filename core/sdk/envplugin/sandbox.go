package envplugin

import (
	"context"
	"fmt"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/sandboxplugin"
	"github.com/rlhost/rlhost/core/sdk/wire/frames"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// sandboxClient is the environment's view of a lent Sandbox: calls on the
// one connection to the socket it is lent on (the host's, or its backend's),
// shared by all the episodes lent there. Every call names the sandbox,
// which is how the server routes it, and carries the episode's token,
// which a backend's socket requires.
type sandboxClient struct {
	c     *frames.Client
	id    string
	token []byte
}

// call sends one call on the sandbox.
func (c *sandboxClient) call(ctx context.Context, call *rlhostpb.LentCall) (*rlhostpb.LentReply, error) {
	call.Token = c.token
	return c.c.Call(ctx, call)
}

func (c *sandboxClient) ID() string { return c.id }

// errWrongReply is a reply of another kind than its call's: a server bug.
func errWrongReply(rep *rlhostpb.LentReply) error {
	return fmt.Errorf("the lent-sandbox server answered with a %T", rep.GetResult())
}

func (c *sandboxClient) Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	rep, err := c.call(ctx, &rlhostpb.LentCall{Call: &rlhostpb.LentCall_Exec{Exec: sandboxplugin.FromExecRequest(c.id, req)}})
	if err == nil && rep.GetExec() == nil {
		err = errWrongReply(rep)
	}
	if err != nil {
		return core.ExecResult{}, fmt.Errorf("exec in lent sandbox: %w", err)
	}
	return sandboxplugin.ToExecResult(rep.GetExec()), nil
}

func (c *sandboxClient) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	rep, err := c.call(ctx, &rlhostpb.LentCall{Call: &rlhostpb.LentCall_ReadFile{ReadFile: &rlhostpb.ReadFileRequest{SandboxId: c.id, Path: []byte(path), MaxBytes: maxBytes}}})
	if err == nil && rep.GetReadFile() == nil {
		err = errWrongReply(rep)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s in lent sandbox: %w", path, err)
	}
	return rep.GetReadFile().GetData(), nil
}

func (c *sandboxClient) WriteFile(ctx context.Context, path string, data []byte, mode uint32) error {
	rep, err := c.call(ctx, &rlhostpb.LentCall{Call: &rlhostpb.LentCall_WriteFile{WriteFile: &rlhostpb.WriteFileRequest{SandboxId: c.id, Path: []byte(path), Data: data, Mode: mode}}})
	if err == nil && rep.GetWriteFile() == nil {
		err = errWrongReply(rep)
	}
	if err != nil {
		return fmt.Errorf("write %s in lent sandbox: %w", path, err)
	}
	return nil
}

func (c *sandboxClient) ListFiles(ctx context.Context, path string) ([]core.FileInfo, error) {
	rep, err := c.call(ctx, &rlhostpb.LentCall{Call: &rlhostpb.LentCall_ListFiles{ListFiles: &rlhostpb.ListFilesRequest{SandboxId: c.id, Path: []byte(path)}}})
	if err == nil && rep.GetListFiles() == nil {
		err = errWrongReply(rep)
	}
	if err != nil {
		return nil, fmt.Errorf("list %s in lent sandbox: %w", path, err)
	}
	return sandboxplugin.ToFiles(rep.GetListFiles()), nil
}
