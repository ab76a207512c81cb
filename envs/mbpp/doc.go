// Package mbpp is the MBPP environment plugin: an agent solves a Python
// programming problem with shell and file tools in a sandbox that persists
// across its turns and attempts. When it ends a turn without tool calls, the
// env runs the problem's hidden tests in the same sandbox; failures are sent
// back as feedback until the attempts run out. The reward is binary (1 when
// every test passes), optionally discounted per attempt.
//
// Grading is built so that nothing the agent did earlier in the sandbox can
// fake a pass: the trusted half of the grader never runs agent code and only
// ever receives plain data from the untrusted half (see grader.go).
//
// It deliberately does not download datasets, sample batches, or talk to a
// policy: the host does those. It reads MBPP-format files the user supplies.
package mbpp
