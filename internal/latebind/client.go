package latebind

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
)

// maxResponse bounds what Deliver reads from sandboxd.
const maxResponse = 64 << 10

// Deliver posts env to the sandboxd at ip:port and returns its Ack. Any
// answer but 200 with a well-formed Ack is an error.
func Deliver(ctx context.Context, hc *http.Client, ip string, port int, env *Envelope) (*Ack, error) {
	body, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encoding envelope: %w", err)
	}
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(port)) + Path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("building delivery request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("delivering env to %s: %w", ip, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("reading delivery answer from %s: %w", ip, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("sandboxd at %s refused the delivery: %s: %s", ip, resp.Status, bytes.TrimSpace(data))
	}
	var ack Ack
	if err := json.Unmarshal(data, &ack); err != nil {
		return nil, fmt.Errorf("decoding delivery answer from %s: %w", ip, err)
	}
	return &ack, nil
}

// Probe reads the binding State of the sandboxd at ip:port (GET Path). Any
// answer but 200 with a well-formed State is an error: whatever listens
// there is not a sandboxd that takes late-bound env.
func Probe(ctx context.Context, hc *http.Client, ip string, port int) (*State, error) {
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(port)) + Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("building probe request: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("probing %s: %w", ip, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("reading probe answer from %s: %w", ip, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered the probe with %s", ip, resp.Status)
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("decoding probe answer from %s: %w", ip, err)
	}
	return &st, nil
}
