package fakeaviato

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pb "github.com/rlhost/rlhost/plugins/aviato/aviatopb"
	"github.com/rlhost/rlhost/plugins/fakelatency"
)

// With a latency model, a sandbox is not RUNNING before its create
// latency, and exec and file calls answer no sooner than theirs.
func TestLatencyModel(t *testing.T) {
	lat := fakelatency.Model{
		Create: fakelatency.Latency{Base: 400 * time.Millisecond, Jitter: 100 * time.Millisecond, Dist: fakelatency.Exponential},
		Exec:   fakelatency.Latency{Base: 200 * time.Millisecond},
		Files:  fakelatency.Latency{Base: 100 * time.Millisecond},
		Seed:   5,
	}
	s := start(t, Options{Latency: lat})
	conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewATCServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+DefaultAPIKey)
	began := time.Now()
	r, err := c.Start(ctx, &pb.StartSandboxRequest{ContainerImage: "i"})
	if err != nil {
		t.Fatal(err)
	}
	id := r.GetSandboxId()
	defer c.Delete(ctx, &pb.DeleteSandboxRequest{SandboxId: id})
	for {
		g, err := c.Get(ctx, &pb.GetSandboxRequest{SandboxId: id})
		if err != nil {
			t.Fatal(err)
		}
		if g.GetSandboxStatus() == pb.SandboxStatus_SANDBOX_STATUS_RUNNING {
			break
		}
		if g.GetSandboxStatus() == pb.SandboxStatus_SANDBOX_STATUS_FAILED {
			t.Fatal("the sandbox failed to start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if took := time.Since(began); took < lat.Create.Base {
		t.Errorf("RUNNING after %s, before the create latency %s", took, lat.Create.Base)
	}
	began = time.Now()
	res, err := c.Exec(ctx, &pb.ExecSandboxRequest{SandboxId: id, Command: []string{"echo", "hi"}})
	if err != nil || string(res.GetResult().GetStdout()) != "hi\n" {
		t.Fatalf("exec: %v %v", res, err)
	}
	if took := time.Since(began); took < lat.Exec.Base {
		t.Errorf("exec answered after %s, before its latency %s", took, lat.Exec.Base)
	}
	began = time.Now()
	if a, err := c.AddFile(ctx, &pb.AddFileSandboxRequest{SandboxId: id, Filepath: "/workspace/f", FileContents: []byte("x")}); err != nil || !a.GetSuccess() {
		t.Fatalf("add file: %v %v", a, err)
	}
	if took := time.Since(began); took < lat.Files.Base {
		t.Errorf("AddFile answered after %s, before its latency %s", took, lat.Files.Base)
	}
}
