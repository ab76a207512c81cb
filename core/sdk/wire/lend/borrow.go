package lend

import (
	"context"
	"fmt"
	"net"

	"github.com/rlhost/rlhost/core"
	"github.com/rlhost/rlhost/core/sdk/wire/frames"
	"github.com/rlhost/rlhost/core/sdk/wire/rlhostpb"
)

// Conn is an environment's connection to a Socket (the host's, or a
// backend's), shared by every episode lent there.
type Conn = frames.Conn[rlhostpb.LentCall, rlhostpb.LentReply, *rlhostpb.LentCall, *rlhostpb.LentReply]

// wireName names the lent-sandbox wire in errors and logs.
const wireName = "lent sandbox"

// Dial connects to the Socket at path.
func Dial(ctx context.Context, path string) (*Conn, error) {
	return frames.Dial[rlhostpb.LentCall, rlhostpb.LentReply](ctx, path, wireName)
}

// NewConn runs an environment's end of a Socket on conn until conn ends or
// Close.
func NewConn(conn net.Conn) *Conn {
	return frames.NewConn[rlhostpb.LentCall, rlhostpb.LentReply](conn, wireName)
}

// Borrowed is a sandbox as the environment it is lent to holds it: calls
// on the Conn to the socket it is lent on. Every call names the sandbox,
// which is how the socket routes it, and carries the loan's token, which a
// backend's socket requires.
type Borrowed struct {
	conn  *Conn
	id    string
	token []byte
}

var _ core.Sandbox = (*Borrowed)(nil)

// Borrow is sandbox id, lent on conn's socket under token (nil on the
// host's socket).
func Borrow(conn *Conn, id string, token []byte) *Borrowed {
	return &Borrowed{conn: conn, id: id, token: token}
}

// Conn is the connection the sandbox's calls go on.
func (b *Borrowed) Conn() *Conn { return b.conn }

// call sends one call on the sandbox.
func (b *Borrowed) call(ctx context.Context, call *rlhostpb.LentCall) (*rlhostpb.LentReply, error) {
	call.Token = b.token
	return b.conn.Call(ctx, call)
}

// ID returns the sandbox id.
func (b *Borrowed) ID() string { return b.id }

// errWrongReply is a reply of another kind than its call's: a server bug.
func errWrongReply(rep *rlhostpb.LentReply) error {
	return fmt.Errorf("the lent-sandbox server answered with a %T", rep.GetResult())
}

// Exec runs a command in the sandbox.
func (b *Borrowed) Exec(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	rep, err := b.call(ctx, &rlhostpb.LentCall{Call: &rlhostpb.LentCall_Exec{Exec: rlhostpb.FromExecRequest(b.id, req)}})
	if err == nil && rep.GetExec() == nil {
		err = errWrongReply(rep)
	}
	if err != nil {
		return core.ExecResult{}, fmt.Errorf("exec in lent sandbox: %w", err)
	}
	return rlhostpb.ToExecResult(rep.GetExec()), nil
}

// ReadFile reads a file of the sandbox.
func (b *Borrowed) ReadFile(ctx context.Context, path string, maxBytes int64) ([]byte, error) {
	rep, err := b.call(ctx, &rlhostpb.LentCall{Call: &rlhostpb.LentCall_ReadFile{ReadFile: &rlhostpb.ReadFileRequest{SandboxId: b.id, Path: []byte(path), MaxBytes: maxBytes}}})
	if err == nil && rep.GetReadFile() == nil {
		err = errWrongReply(rep)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s in lent sandbox: %w", path, err)
	}
	return rep.GetReadFile().GetData(), nil
}

// WriteFile writes a file of the sandbox.
func (b *Borrowed) WriteFile(ctx context.Context, path string, data []byte, mode uint32) error {
	rep, err := b.call(ctx, &rlhostpb.LentCall{Call: &rlhostpb.LentCall_WriteFile{WriteFile: &rlhostpb.WriteFileRequest{SandboxId: b.id, Path: []byte(path), Data: data, Mode: mode}}})
	if err == nil && rep.GetWriteFile() == nil {
		err = errWrongReply(rep)
	}
	if err != nil {
		return fmt.Errorf("write %s in lent sandbox: %w", path, err)
	}
	return nil
}

// ListFiles lists a directory of the sandbox.
func (b *Borrowed) ListFiles(ctx context.Context, path string) ([]core.FileInfo, error) {
	rep, err := b.call(ctx, &rlhostpb.LentCall{Call: &rlhostpb.LentCall_ListFiles{ListFiles: &rlhostpb.ListFilesRequest{SandboxId: b.id, Path: []byte(path)}}})
	if err == nil && rep.GetListFiles() == nil {
		err = errWrongReply(rep)
	}
	if err != nil {
		return nil, fmt.Errorf("list %s in lent sandbox: %w", path, err)
	}
	return rlhostpb.ToFiles(rep.GetListFiles()), nil
}
