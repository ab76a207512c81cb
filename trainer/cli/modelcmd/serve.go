package modelcmd

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/rlhost/rlhost/trainer/model"
	"github.com/rlhost/rlhost/trainer/serve"
	"github.com/rlhost/rlhost/trainer/tokenizer"
)

// runServe serves a model directory with the embedded server until the
// context ends or the process gets SIGINT or SIGTERM: a stand-in for
// `vllm serve` on a laptop, adapters and all.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("serve", "serve --model DIR [--port N] [--name NAME] [--enable-lora]", stdout, stderr)
	dir := fs.String("model", "", "Hugging Face model directory to serve (required)")
	name := fs.String("name", "", "the model name requests send (default: the directory as given)")
	port := fs.Int("port", 8000, "loopback port to listen on (0 picks one)")
	maxBatch := fs.Int("max-batch", 16, "sequences generated at once")
	maxLen := fs.Int("max-seq-len", 0, "prompt plus completion per sequence (default min(2048, the model's))")
	threads := fs.Int("threads", 0, "CPU worker threads (default: all cores)")
	enableLoRA := fs.Bool("enable-lora", false, "serve LoRA adapters loaded at runtime (POST /v1/load_lora_adapter, as vLLM)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("%w: --model is required", errUsage)
	}
	if *name == "" {
		*name = *dir
	}
	m, be, err := loadModel(*dir, *threads)
	if err != nil {
		return err
	}
	defer be.Close()
	tok, err := tokenizer.LoadDir(filepath.Clean(*dir))
	if err != nil {
		return err
	}
	opts := serve.Options{ModelName: *name, MaxBatch: *maxBatch, MaxSeqLen: *maxLen}
	if *enableLoRA {
		if opts.Adapters, err = adapterHost(m); err != nil {
			return err
		}
	}
	s, err := serve.New(m, tok, opts)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	base, err := s.Listen(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "serving %s at %s (requests send \"model\": %q, or leave it out)\n", *dir, base, *name)
	if *enableLoRA {
		fmt.Fprintf(stdout, "LoRA adapters load with POST %s/load_lora_adapter\n", base)
	}
	<-ctx.Done()
	return nil
}

// adapterHost gives the server LoRA adapters on m.
func adapterHost(m *model.Model) (serve.AdapterHost, error) { return serve.LoRA(m), nil }
