package fakeaviato

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/rlhost/rlhost/plugins/aviato/aviatopb"
	"github.com/rlhost/rlhost/plugins/local"
)

func TestMain(m *testing.M) {
	if local.Reexec() {
		return
	}
	os.Exit(m.Run())
}

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// crossCheck is what crosscheck.py must see from the fake, whichever
// modules it drives it with.
var crossCheck = map[string]any{
	"bad_key":              "UNAUTHENTICATED",
	"start_status":         "SANDBOX_STATUS_PENDING",
	"polled":               []any{"SANDBOX_STATUS_PENDING", "SANDBOX_STATUS_CREATING", "SANDBOX_STATUS_CREATING", "SANDBOX_STATUS_RUNNING"},
	"exec":                 []any{"check\n", "oops\n", float64(3)},
	"file":                 []any{true, true, "6869007468657265"},
	"missing_file_success": false,
	"list_tagged":          []any{true},
	"list_other":           float64(0),
	"stop":                 []any{true, "SANDBOX_STATUS_TERMINATED"},
	"after_delete":         "NOT_FOUND",
	"delete":               true,
}

func runCrossCheck(t *testing.T, mode, where string) {
	t.Helper()
	s := start(t, Options{StartPolls: 3})
	out, err := exec.Command("/usr/bin/python3", "testdata/crosscheck.py", mode, where, s.Addr, DefaultAPIKey).CombinedOutput()
	if err != nil {
		t.Fatalf("crosscheck.py %s: %v\n%s", mode, err, out)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("crosscheck.py output: %v\n%s", err, out)
	}
	for k, want := range crossCheck {
		if !reflect.DeepEqual(got[k], want) {
			t.Errorf("%s: got %#v, want %#v", k, got[k], want)
		}
	}
	if left := s.Sandboxes(); len(left) != 0 {
		t.Errorf("sandboxes left: %+v", left)
	}
}

// needPython skips when Debian's python3-grpcio / python3-protobuf are
// missing: the cross-check has nothing to run with then.
func needPython(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import grpc, google.protobuf").Run(); err != nil {
		t.Skip("needs /usr/bin/python3 with python3-grpcio and python3-protobuf (apt-get install python3-grpcio python3-protobuf)")
	}
}

// Python modules protoc generates from the recovered .proto files speak to
// the fake: the recovered definitions and the Go stubs agree on the wire.
func TestCrossCheckRecoveredProtoPython(t *testing.T) {
	needPython(t)
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Skip("needs protoc (apt-get install protobuf-compiler)")
	}
	gen := t.TempDir()
	protoDir, _ := filepath.Abs("../proto")
	cmd := exec.Command("protoc", "-I", protoDir, "--python_out="+gen,
		"coreweave/aviato/v1beta1/atc.proto", "coreweave/aviato/v1beta1/secrets.proto")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}
	for _, d := range []string{"coreweave", "coreweave/aviato", "coreweave/aviato/v1beta1"} {
		os.WriteFile(filepath.Join(gen, d, "__init__.py"), nil, 0o644)
	}
	runCrossCheck(t, "generated", gen)
}

// The official client's own generated modules (atc_pb2.py and friends from
// cwsandbox-client v0.16.0) speak to the fake. They are not part of this
// repository; point RLHOST_AVIATO_CLIENT_SRC at the client's src directory.
func TestCrossCheckOfficialClientModules(t *testing.T) {
	needPython(t)
	src := os.Getenv("RLHOST_AVIATO_CLIENT_SRC")
	if src == "" {
		t.Skip("set RLHOST_AVIATO_CLIENT_SRC to cwsandbox-client v0.16.0's src directory to run the official modules against the fake")
	}
	runCrossCheck(t, "client", src)
}

func TestAuthAndStates(t *testing.T) {
	s := start(t, Options{WandbKey: "wk", WandbEntity: "team"})
	conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewATCServiceClient(conn)
	ctx := context.Background()
	bearer := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+DefaultAPIKey)
	tests := []struct {
		name string
		ctx  context.Context
		req  *pb.StartSandboxRequest
		code codes.Code
	}{
		{"no credentials", ctx, &pb.StartSandboxRequest{ContainerImage: "i"}, codes.Unauthenticated},
		{"wrong W&B entity", metadata.AppendToOutgoingContext(ctx, "x-api-key", "wk", "x-entity-id", "other"), &pb.StartSandboxRequest{ContainerImage: "i"}, codes.Unauthenticated},
		{"W&B credentials", metadata.AppendToOutgoingContext(ctx, "x-api-key", "wk", "x-entity-id", "team"), &pb.StartSandboxRequest{ContainerImage: "i"}, codes.OK},
		{"no image", bearer, &pb.StartSandboxRequest{}, codes.InvalidArgument},
		{"bad quantity", bearer, &pb.StartSandboxRequest{ContainerImage: "i", ResourceLimits: &pb.ResourceRequest{Memory: "lots"}}, codes.InvalidArgument},
		{"negative lifetime", bearer, &pb.StartSandboxRequest{ContainerImage: "i", MaxLifetimeSeconds: -1}, codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Start(tc.ctx, tc.req)
			if status.Code(err) != tc.code {
				t.Errorf("got %v, want %v", err, tc.code)
			}
		})
	}
	// A sandbox whose lifetime ends is TERMINATED, and exec then fails.
	r, err := c.Start(bearer, &pb.StartSandboxRequest{ContainerImage: "i", MaxLifetimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	for {
		g, err := c.Get(bearer, &pb.GetSandboxRequest{SandboxId: r.GetSandboxId()})
		if err != nil {
			t.Fatal(err)
		}
		if g.GetSandboxStatus() == pb.SandboxStatus_SANDBOX_STATUS_TERMINATED {
			break
		}
	}
	if _, err := c.Exec(bearer, &pb.ExecSandboxRequest{SandboxId: r.GetSandboxId(), Command: []string{"true"}}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("exec in a terminated sandbox: %v", err)
	}
	l, err := c.List(bearer, &pb.ListSandboxesRequest{IncludeStopped: true, Status: pb.SandboxStatus_SANDBOX_STATUS_TERMINATED})
	if err != nil || len(l.GetSandboxes()) != 1 {
		t.Errorf("list stopped: %v, %v", l, err)
	}
}
