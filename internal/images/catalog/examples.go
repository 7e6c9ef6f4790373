package catalog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/agent-sandbox/internal/images"
)

// The example images (examples/jupyterlab, examples/chrome) are Debian
// bookworm root file systems customised in a chroot: packages from the
// Debian mirror (with bookworm-security, so the browser and its libraries
// are current), Python packages from PyPI. Neither needs sandboxd: the
// workload itself is the server.

// MinimalRootfs is a bare bookworm minbase, the base of the chrome image.
var MinimalRootfs = images.Debootstrap{
	Suite: "bookworm", Variant: "minbase", Mirror: "http://deb.debian.org/debian",
}

// aptSecurity enables bookworm-security and brings the base up to date.
const aptSecurity = `echo 'deb http://deb.debian.org/debian-security bookworm-security main' > /etc/apt/sources.list.d/debian-security.list
apt-get update -q
apt-get upgrade -y -q
`

// aptClean removes what apt leaves behind and an image does not need.
const aptClean = `apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/*.log /var/cache/debconf/*-old /var/lib/dpkg/*-old
`

const (
	jupyterVenv = "/opt/jupyter"
	jupyterHome = "/home/jovyan"
	// JupyterRequirements is the pinned package list the image installs,
	// relative to the module root.
	JupyterRequirements = "examples/jupyterlab/requirements.txt"
)

// jupyterRootfs is python-runtime's base plus a virtualenv with the pinned
// JupyterLab from PyPI.
func jupyterRootfs(moduleDir string) (Customized, error) {
	req, err := os.ReadFile(filepath.Join(moduleDir, JupyterRequirements))
	if err != nil {
		return Customized{}, err
	}
	return Customized{
		Name: "jupyterlab",
		Base: PythonRootfs,
		Script: aptSecurity + `apt-get install -y -q --no-install-recommends python3-venv
python3 -m venv ` + jupyterVenv + `
` + jupyterVenv + `/bin/pip install -q -r /tmp/requirements.txt
` + aptClean,
		Inputs: map[string][]byte{"/tmp/requirements.txt": req},
	}, nil
}

// jupyterLabSpec runs `jupyter lab` on 0.0.0.0:8888 as jovyan (uid 1000,
// the name JupyterHub's images use) in /home/jovyan. The token comes from
// the JUPYTER_TOKEN environment variable (set it from a Secret); without
// one JupyterLab makes up a token and prints it in its log.
func jupyterLabSpec(ctx context.Context, o Options) (images.Spec, error) {
	c, err := jupyterRootfs(o.ModuleDir)
	if err != nil {
		return images.Spec{}, err
	}
	rootfs, err := EnsureCustomized(ctx, o.CacheDir, c, o.Log)
	if err != nil {
		return images.Spec{}, err
	}
	passwd, group, err := userEntries(rootfs, "jovyan", jupyterHome, "/bin/bash")
	if err != nil {
		return images.Spec{}, err
	}
	return images.Spec{
		Ref:        o.Repo + "/jupyterlab:" + o.Tag,
		BaseRootfs: rootfs,
		Dirs:       []images.Dir{{Path: jupyterHome, Mode: 0o755, UID: sandboxUID, GID: sandboxUID}},
		Files: []images.File{
			{Path: "/etc/passwd", Content: passwd},
			{Path: "/etc/group", Content: group},
		},
		Entrypoint: []string{jupyterVenv + "/bin/jupyter", "lab"},
		Cmd:        []string{"--ip=0.0.0.0", "--port=8888", "--no-browser", "--ServerApp.root_dir=" + jupyterHome},
		Env: []string{
			"PATH=" + jupyterVenv + "/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LANG=C.UTF-8", "HOME=" + jupyterHome, "SHELL=/bin/bash", "PYTHONUNBUFFERED=1",
		},
		WorkingDir:   jupyterHome,
		User:         fmt.Sprintf("%d:%d", sandboxUID, sandboxUID),
		ExposedPorts: []string{"8888/tcp"},
	}, nil
}

// chromeRootfs is bookworm minbase plus Debian's chromium-headless-shell
// (Chromium's headless mode without X or GTK libraries) and socat.
var chromeRootfs = Customized{
	Name: "chrome",
	Base: MinimalRootfs,
	Script: aptSecurity + noMesaDRI + `apt-get install -y -q --no-install-recommends chromium-headless-shell socat
` + aptClean,
}

// noMesaDRI installs an empty package that provides libgl1-mesa-dri. The
// headless shell renders in software and never loads Mesa, but
// chromium-common depends on x11-utils, which pulls in libgl1 and through
// it Mesa's drivers and LLVM: 160 MB the image does not need.
const noMesaDRI = `mkdir -p /tmp/no-mesa-dri/DEBIAN
printf '%s\n' 'Package: no-mesa-dri' 'Version: 1.0' 'Architecture: all' 'Maintainer: agent-sandbox' \
  'Provides: libgl1-mesa-dri' 'Description: stands in for libgl1-mesa-dri in images without a GPU' \
  > /tmp/no-mesa-dri/DEBIAN/control
dpkg-deb --build /tmp/no-mesa-dri /tmp/no-mesa-dri.deb
dpkg -i /tmp/no-mesa-dri.deb
rm -rf /tmp/no-mesa-dri /tmp/no-mesa-dri.deb
`

// ChromeBinary is the headless shell inside the chrome image.
const ChromeBinary = "/usr/lib/chromium/chromium-headless-shell"

const (
	chromeHome       = "/home/chrome"
	chromeEntrypoint = "/usr/local/bin/chrome-cdp"
)

// chromeCDP is the chrome image's entrypoint. Chromium binds the DevTools
// port to 127.0.0.1 whatever --remote-debugging-address says, so the
// browser listens on 127.0.0.1:9223 and socat publishes it on every
// interface of the pod at $CDP_PORT (9222). Chromium answers only requests
// whose Host is an IP address or localhost, and builds the WebSocket URLs
// it returns from that Host, so clients dial the pod IP and stay on 9222.
const chromeCDP = `#!/bin/sh
set -eu
socat TCP-LISTEN:"${CDP_PORT:-9222}",fork,reuseaddr TCP:127.0.0.1:9223 &
exec ` + ChromeBinary + ` --remote-debugging-port=9223 "$@"
`

// chromeSpec runs the headless shell with the DevTools protocol on port
// 9222 as uid 1000. --no-sandbox: Chromium's own sandbox needs user
// namespaces and seccomp filters that gVisor (the real sandbox here) does
// not offer inside a pod; --disable-dev-shm-usage: a pod's /dev/shm is
// small. The browser's arguments are the image's Cmd, so a Sandbox can
// replace them with its container's args.
func chromeSpec(ctx context.Context, o Options) (images.Spec, error) {
	rootfs, err := EnsureCustomized(ctx, o.CacheDir, chromeRootfs, o.Log)
	if err != nil {
		return images.Spec{}, err
	}
	passwd, group, err := userEntries(rootfs, "chrome", chromeHome, "/bin/sh")
	if err != nil {
		return images.Spec{}, err
	}
	return images.Spec{
		Ref:        o.Repo + "/chrome:" + o.Tag,
		BaseRootfs: rootfs,
		Dirs:       []images.Dir{{Path: chromeHome, Mode: 0o755, UID: sandboxUID, GID: sandboxUID}},
		Files: []images.File{
			{Path: "/etc/passwd", Content: passwd},
			{Path: "/etc/group", Content: group},
			{Path: chromeEntrypoint, Mode: 0o755, Content: []byte(chromeCDP)},
		},
		Entrypoint: []string{chromeEntrypoint},
		Cmd: []string{
			"--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
			"--user-data-dir=" + chromeHome + "/profile", "about:blank",
		},
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"LANG=C.UTF-8", "HOME=" + chromeHome, "CDP_PORT=9222",
		},
		WorkingDir:   chromeHome,
		User:         fmt.Sprintf("%d:%d", sandboxUID, sandboxUID),
		ExposedPorts: []string{"9222/tcp"},
	}, nil
}

// userEntries returns the root file system's /etc/passwd and /etc/group
// with a user and group of that name for uid/gid 1000.
func userEntries(rootfs, name, home, shell string) (passwd, group []byte, err error) {
	passwd, err = withEntry(filepath.Join(rootfs, "etc", "passwd"), fmt.Sprintf("%s:x:%d:%d:%s:%s:%s", name, sandboxUID, sandboxUID, name, home, shell))
	if err != nil {
		return nil, nil, err
	}
	group, err = withEntry(filepath.Join(rootfs, "etc", "group"), fmt.Sprintf("%s:x:%d:", name, sandboxUID))
	return passwd, group, err
}
