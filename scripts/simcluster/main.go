// Command simcluster simulates, on this machine, the remote side of a
// large rlhost run: several vLLM servers (fakevllm with its throughput
// model, each playing a model that solves MBPP problems with tools) and a
// sandbox service (fakedaytona, and optionally fakeaviato, with their
// latency models; the sandbox commands run for real, on this machine).
// One rlhost host drives it as it would drive a cluster: its policy block
// names the servers in base_urls, its sandbox block points at the fake
// service.
//
//	go run ./scripts/simcluster -dataset examples/mbpp/sample.jsonl
//
// It prints one JSON line (Endpoints) on stdout and serves until stdin
// closes or it is interrupted. The control URL answers GET /sandboxes
// (live sandboxes per service) and GET /stats (each server's
// fakevllm.Stats); each server also answers its own stats at
// fakevllm.StatsRoute. make bench's cluster section starts it from
// host/cmd/rlhost's BenchmarkCluster, so that what the simulated cluster
// costs is not counted as the host's.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rlhost/rlhost/envs/mbpp"
	"github.com/rlhost/rlhost/host/policy/fakevllm"
	"github.com/rlhost/rlhost/plugins/aviato/fakeaviato"
	"github.com/rlhost/rlhost/plugins/daytona/fakedaytona"
	"github.com/rlhost/rlhost/plugins/fakelatency"
	"github.com/rlhost/rlhost/plugins/local"
)

// Endpoints is what simcluster prints: where each part listens.
type Endpoints struct {
	Model   string   `json:"model"`    // the served base model name
	VLLM    []string `json:"vllm"`     // base URLs, ending in /v1
	Daytona *Service `json:"daytona"`  // nil when not started
	Aviato  *Service `json:"aviato"`   // nil when not started
	Control string   `json:"control"`  // GET /sandboxes, GET /stats
	PID     int      `json:"pid"`      // this process
	Config  Config   `json:"settings"` // what was simulated
}

// Service is a fake sandbox service's address and key.
type Service struct {
	URL    string `json:"url"`
	APIKey string `json:"api_key"`
}

// Config is the simulation's settings, as the flags set them.
type Config struct {
	Servers    int                 `json:"servers"`
	Throughput fakevllm.Throughput `json:"throughput"`
	WrongFirst float64             `json:"wrong_first"`
	Think      int                 `json:"think_tokens"`
	Latency    map[string]string   `json:"latency"`
}

func main() {
	if local.Reexec() { // fakeaviato's sandboxes are local ones
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "simcluster:", err)
		os.Exit(1)
	}
}

func run() error {
	servers := flag.Int("servers", 4, "simulated vLLM servers")
	model := flag.String("model", "sim-base", "served model name")
	dataset := flag.String("dataset", "examples/mbpp/sample.jsonl", "MBPP file whose reference solutions the simulated model writes")
	wrong := flag.Float64("wrong-first", 0.3, "share of episodes whose first attempt fails the tests")
	think := flag.Int("think-tokens", 150, "about how many tokens of prose precede each action")
	var tp fakevllm.Throughput
	flag.Float64Var(&tp.PeakDecode, "peak-decode", 6000, "per server: aggregate decode tokens/s a large batch approaches")
	flag.Float64Var(&tp.HalfBatch, "half-batch", 64, "per server: sequences in flight at half the peak decode rate")
	flag.Float64Var(&tp.Prefill, "prefill", 40000, "per server: prompt tokens/s")
	flag.IntVar(&tp.MaxBatch, "max-batch", 256, "per server: most sequences running at once (vllm --max-num-seqs)")
	flag.BoolVar(&tp.PrefixCache, "prefix-cache", true, "per server: skip the prefill of prompt prefixes seen before")
	daytona := flag.Bool("daytona", true, "start a fake Daytona")
	aviato := flag.Bool("aviato", false, "start a fake Aviato (local sandboxes with Linux namespaces)")
	seed := flag.Uint64("seed", 1, "seed of the latencies' jitter")
	lat := map[string]*fakelatency.Latency{}
	for _, l := range []struct{ name, def, what string }{
		{"create", "1s+exp(500ms)", "until a new sandbox runs"},
		{"exec", "40ms+exp(20ms)", "before a command starts"},
		{"files", "20ms+exp(10ms)", "of each file call"},
	} {
		v := new(fakelatency.Latency)
		*v, _ = fakelatency.Parse(l.def)
		lat[l.name] = v
		flag.Func(l.name+"-latency", "sandbox service latency "+l.what+" (BASE[+JITTER], JITTER as 500ms, uniform(500ms) or exp(500ms); default "+l.def+")", func(s string) error {
			p, err := fakelatency.Parse(s)
			*v = p
			return err
		})
	}
	flag.Parse()
	if *servers < 1 {
		return fmt.Errorf("-servers %d: want at least 1", *servers)
	}
	problems, err := mbpp.LoadDataset(mbpp.DatasetOptions{Path: *dataset})
	if err != nil {
		return err
	}
	agent := fakevllm.MBPPAgent{Solutions: map[string]string{}, WrongFirst: *wrong, ThinkTokens: *think}
	for _, p := range problems {
		agent.Solutions[strings.TrimSpace(p.Text)] = p.Code
	}
	model0 := fakelatency.Model{Create: *lat["create"], Exec: *lat["exec"], Files: *lat["files"], Seed: *seed}

	ep := Endpoints{Model: *model, PID: os.Getpid(), Config: Config{Servers: *servers, Throughput: tp, WrongFirst: *wrong, Think: *think,
		Latency: map[string]string{"create": model0.Create.String(), "exec": model0.Exec.String(), "files": model0.Files.String()}}}
	var fleet []*fakevllm.Server
	for range *servers {
		s := fakevllm.New(fakevllm.Options{BaseModel: *model, AllowRuntimeLoRA: true, Agent: agent.Reply, Throughput: &tp})
		defer s.Close()
		fleet = append(fleet, s)
		ep.VLLM = append(ep.VLLM, s.URL()+"/v1")
	}
	var dt *fakedaytona.Server
	if *daytona {
		if dt, err = fakedaytona.New(fakedaytona.Options{Latency: model0}); err != nil {
			return err
		}
		defer dt.Close()
		ep.Daytona = &Service{URL: dt.URL, APIKey: dt.APIKey}
	}
	var av *fakeaviato.Server
	if *aviato {
		if av, err = fakeaviato.New(fakeaviato.Options{Latency: model0}); err != nil {
			return err
		}
		defer av.Close()
		ep.Aviato = &Service{URL: av.URL, APIKey: fakeaviato.DefaultAPIKey}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		live := map[string]int{}
		if dt != nil {
			live["daytona"] = len(dt.Sandboxes())
		}
		if av != nil {
			live["aviato"] = len(av.Sandboxes())
		}
		json.NewEncoder(w).Encode(live)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		var st []fakevllm.Stats
		for _, s := range fleet {
			st = append(st, s.Stats())
		}
		json.NewEncoder(w).Encode(st)
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(lis, mux)
	ep.Control = "http://" + lis.Addr().String()
	if err := json.NewEncoder(os.Stdout).Encode(ep); err != nil {
		return err
	}

	// Serve until stdin closes (the parent is gone) or a signal comes.
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(io.Discard, os.Stdin)
		done <- struct{}{}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-done:
	case <-sig:
	}
	return nil
}
