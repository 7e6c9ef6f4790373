package mcp

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

type uploadIn struct {
	claimIn
	Path    string  `json:"path" jsonschema:"destination path, relative to the sandbox's workspace (parent directories are created)"`
	Content string  `json:"content" jsonschema:"file content: text, or base64 when binary is true"`
	Binary  bool    `json:"binary,omitempty" jsonschema:"content is base64-encoded binary data"`
	Timeout float64 `json:"timeout,omitempty" jsonschema:"seconds the operation may take, 0 < timeout <= 600 (default 60)"`
}

type uploadOut struct {
	BytesWritten int `json:"bytes_written"`
}

type downloadIn struct {
	claimIn
	Path    string  `json:"path" jsonschema:"file path, relative to the sandbox's workspace"`
	Binary  bool    `json:"binary,omitempty" jsonschema:"return the content base64-encoded (needed for non-UTF-8 files)"`
	Timeout float64 `json:"timeout,omitempty" jsonschema:"seconds the operation may take, 0 < timeout <= 600 (default 60)"`
}

type downloadOut struct {
	Content   string `json:"content"`
	BytesRead int    `json:"bytes_read"`
}

type listIn struct {
	claimIn
	Path       string  `json:"path" jsonschema:"directory path, relative to the sandbox's workspace (. for the workspace)"`
	Timeout    float64 `json:"timeout,omitempty" jsonschema:"seconds the operation may take, 0 < timeout <= 600 (default 60)"`
	MaxEntries int     `json:"max_entries,omitempty" jsonschema:"most entries to return, 1 to 10000 (default 1000)"`
}

type entryOut struct {
	Name    string  `json:"name"`
	Size    int64   `json:"size"`
	Type    string  `json:"type"`
	ModTime float64 `json:"mod_time"`
}

type listOut struct {
	Entries      []entryOut `json:"entries"`
	TotalEntries int        `json:"total_entries"`
	Truncated    bool       `json:"truncated"`
}

type existsIn struct {
	claimIn
	Path    string  `json:"path" jsonschema:"path, relative to the sandbox's workspace"`
	Timeout float64 `json:"timeout,omitempty" jsonschema:"seconds the operation may take, 0 < timeout <= 600 (default 60)"`
}

type existsOut struct {
	Exists bool `json:"exists"`
}

func (s *Server) uploadFile(ctx context.Context, req *sdk.CallToolRequest, in uploadIn) (*sdk.CallToolResult, uploadOut, error) {
	timeout, err := checkTimeout("timeout", in.Timeout)
	if err != nil {
		return nil, uploadOut{}, err
	}
	p, err := remote.CleanWorkspacePath(in.Path)
	if err != nil {
		return nil, uploadOut{}, err
	}
	content := []byte(in.Content)
	if in.Binary {
		if content, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, uploadOut{}, fmt.Errorf("content is not valid base64: %w", err)
		}
	}
	sb, err := s.attach(ctx, req.Session, in.claimIn)
	if err != nil {
		return nil, uploadOut{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := remote.WriteFile(cctx, sb, p, content); err != nil {
		return nil, uploadOut{}, fmt.Errorf("writing %s: %w", in.Path, err)
	}
	return nil, uploadOut{BytesWritten: len(content)}, nil
}

func (s *Server) downloadFile(ctx context.Context, req *sdk.CallToolRequest, in downloadIn) (*sdk.CallToolResult, downloadOut, error) {
	timeout, err := checkTimeout("timeout", in.Timeout)
	if err != nil {
		return nil, downloadOut{}, err
	}
	p, err := remote.CleanWorkspacePath(in.Path)
	if err != nil {
		return nil, downloadOut{}, err
	}
	sb, err := s.attach(ctx, req.Session, in.claimIn)
	if err != nil {
		return nil, downloadOut{}, err
	}
	data, err := sb.Files().Read(ctx, p, sandbox.WithTimeout(timeout))
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, downloadOut{}, fmt.Errorf("file %s does not exist in the sandbox", in.Path)
		}
		return nil, downloadOut{}, fmt.Errorf("reading %s: %w", in.Path, err)
	}
	if in.Binary {
		return nil, downloadOut{Content: base64.StdEncoding.EncodeToString(data), BytesRead: len(data)}, nil
	}
	if !utf8.Valid(data) {
		return nil, downloadOut{}, fmt.Errorf("file %s is not UTF-8 text; download it with binary=true", in.Path)
	}
	return nil, downloadOut{Content: string(data), BytesRead: len(data)}, nil
}

func (s *Server) listFiles(ctx context.Context, req *sdk.CallToolRequest, in listIn) (*sdk.CallToolResult, listOut, error) {
	var out listOut
	timeout, err := checkTimeout("timeout", in.Timeout)
	if err != nil {
		return nil, out, err
	}
	if in.MaxEntries < 1 || in.MaxEntries > maxMaxEntries {
		return nil, out, fmt.Errorf("max_entries must be between 1 and %d, got %d", maxMaxEntries, in.MaxEntries)
	}
	p, err := remote.CleanWorkspacePath(in.Path)
	if err != nil {
		return nil, out, err
	}
	sb, err := s.attach(ctx, req.Session, in.claimIn)
	if err != nil {
		return nil, out, err
	}
	entries, err := sb.Files().List(ctx, p, sandbox.WithTimeout(timeout))
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, out, fmt.Errorf("directory %s does not exist in the sandbox", in.Path)
		}
		return nil, out, fmt.Errorf("listing %s: %w", in.Path, err)
	}
	out.TotalEntries = len(entries)
	out.Entries = []entryOut{}
	for i, e := range entries {
		if i == in.MaxEntries {
			out.Truncated = true
			break
		}
		out.Entries = append(out.Entries, entryOut{
			Name: e.Name, Size: e.Size, Type: string(e.Type),
			ModTime: float64(e.ModTime.UnixNano()) / 1e9,
		})
	}
	return nil, out, nil
}

func (s *Server) fileExists(ctx context.Context, req *sdk.CallToolRequest, in existsIn) (*sdk.CallToolResult, existsOut, error) {
	timeout, err := checkTimeout("timeout", in.Timeout)
	if err != nil {
		return nil, existsOut{}, err
	}
	p, err := remote.CleanWorkspacePath(in.Path)
	if err != nil {
		return nil, existsOut{}, err
	}
	sb, err := s.attach(ctx, req.Session, in.claimIn)
	if err != nil {
		return nil, existsOut{}, err
	}
	ok, err := sb.Files().Exists(ctx, p, sandbox.WithTimeout(timeout))
	if err != nil {
		return nil, existsOut{}, fmt.Errorf("checking %s: %w", in.Path, err)
	}
	return nil, existsOut{Exists: ok}, nil
}
