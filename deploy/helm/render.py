#!/usr/bin/env python3
"""Renders the chart with a real Helm (v4, the library that the `helm-sdkpy` wheel ships) and
optionally validates every object against the Kubernetes OpenAPI schemas (`kubernetes-validate`).

Why this detour: no reachable package registry ships the `helm` CLI, but PyPI's helm-sdkpy
bundles Helm's Go library as a shared object. It has no `template` entry point, only `install`,
so the install goes to a small fake API server on loopback that answers discovery (the kinds
this chart uses), 404s every lookup and accepts every write. Helm returns the release with its
rendered manifest, which this prints. Nothing leaves the machine.

    render.py CHART [-f values.yaml]... [--set-json '{"a": {"b": 1}}']... \
        [--release kepler] [--namespace kepler] [--validate 1.31.0] [--lint]

Exit status: 0 rendered (and valid, and lint-clean); 1 Helm refused the chart, an object is
invalid or lint warned (the reason on stderr); 2 the tools are missing.
"""
import argparse
import ctypes
import importlib.util
import json
import pathlib
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import yaml

# group/version -> (resource, kind, namespaced): what discovery advertises.
RESOURCES = {
    "v1": [
        ("namespaces", "Namespace", False),
        ("serviceaccounts", "ServiceAccount", True),
        ("configmaps", "ConfigMap", True),
        ("secrets", "Secret", True),
        ("services", "Service", True),
    ],
    "apps/v1": [("daemonsets", "DaemonSet", True), ("deployments", "Deployment", True)],
    "rbac.authorization.k8s.io/v1": [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
    ],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)],
    "monitoring.coreos.com/v1": [
        ("servicemonitors", "ServiceMonitor", True),
        ("prometheusrules", "PrometheusRule", True),
    ],
}
# Custom resources: kubernetes-validate has no schema for them; the tests check their fields.
CUSTOM_GROUPS = ("monitoring.coreos.com/",)
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


class FakeApiServer(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = urlparse(self.path).path.rstrip("/")
        if path == "/version":
            return self.reply(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0"})
        if path == "/api":
            return self.reply(200, {"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            groups = []
            for gv in RESOURCES:
                if "/" in gv:
                    group, version = gv.split("/")
                    entry = {"groupVersion": gv, "version": version}
                    groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
            return self.reply(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        for gv, resources in RESOURCES.items():
            if path == ("/api/v1" if gv == "v1" else "/apis/" + gv):
                listed = [
                    {"name": n, "singularName": "", "namespaced": ns, "kind": k, "verbs": VERBS}
                    for n, k, ns in resources
                ]
                return self.reply(
                    200,
                    {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                     "resources": listed},
                )
        if urlparse(self.path).query:  # Helm's release lookup (a labelSelector list): none yet
            return self.reply(200, {"kind": "List", "apiVersion": "v1",
                                    "metadata": {"resourceVersion": "1"}, "items": []})
        return self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "reason": "NotFound", "code": 404, "message": "not found"})

    def accept_write(self, code):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.headers.get("Content-Type", "").startswith("application/vnd.kubernetes.protobuf"):
            # Helm's release record (a Secret, protobuf-encoded): acknowledge it, keep nothing.
            obj = {"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "release"}}
        else:
            obj = json.loads(raw or b"{}")
        obj.setdefault("metadata", {}).update({"resourceVersion": "1", "uid": "fake"})
        self.reply(code, obj)

    def do_POST(self):
        self.accept_write(201)

    def do_PUT(self):
        self.accept_write(200)

    def do_PATCH(self):
        self.accept_write(200)


def helm_library():
    spec = importlib.util.find_spec("helm_sdkpy")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("render.py: helm-sdkpy is not installed (bash scripts/setup.sh installs it)")
    so = pathlib.Path(spec.submodule_search_locations[0]) / "_lib/linux-amd64/libhelm_sdkpy.so"
    lib = ctypes.CDLL(str(so))
    lib.helm_sdkpy_last_error.restype = ctypes.c_void_p
    return lib


def merge(into, extra):
    """Deep-merges maps the way Helm layers values files; anything else replaces."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
    return into


def render(chart, release, namespace, values):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".kubeconfig") as kubeconfig:
            yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {
                    "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "users": [{"name": "fake", "user": {}}],
            }, kubeconfig)
            kubeconfig.flush()
            lib = helm_library()
            handle = ctypes.c_ulonglong()
            if lib.helm_sdkpy_config_create(namespace.encode(), kubeconfig.name.encode(), b"",
                                            b"{}", ctypes.byref(handle)) != 0:
                raise RuntimeError(last_error(lib))
            out = ctypes.c_char_p()
            options = {"wait": False, "timeout_seconds": 30}
            rc = lib.helm_sdkpy_install(handle, release.encode(), str(chart).encode(),
                                        json.dumps(values).encode(), b"",
                                        json.dumps(options).encode(), ctypes.byref(out))
            if rc != 0:
                raise RuntimeError(last_error(lib))
            return json.loads(out.value)["manifest"]
    finally:
        server.shutdown()


def lint(chart):
    """Helm's own lint of the chart (with its default values): problems of warning level or
    worse. The library reports where, not what; `helm lint` tells the rest."""
    lib = helm_library()
    handle = ctypes.c_ulonglong()
    if lib.helm_sdkpy_config_create(b"default", b"", b"", b"{}", ctypes.byref(handle)) != 0:
        raise RuntimeError(last_error(lib))
    out = ctypes.c_char_p()
    if lib.helm_sdkpy_lint(handle, str(chart).encode(), ctypes.byref(out)) != 0:
        raise RuntimeError(last_error(lib))
    report = json.loads(out.value)
    warning = 2  # Helm's severities: 1 info, 2 warning, 3 error
    return [f"lint: {m['Path']}: severity {m['Severity']}"
            for m in report.get("Messages") or [] if m["Severity"] >= warning]


def last_error(lib):
    pointer = lib.helm_sdkpy_last_error()
    return ctypes.string_at(pointer).decode() if pointer else "helm failed without a message"


class StrictLoader(yaml.SafeLoader):
    """Refuses a key given twice in one mapping, as the API server's YAML decoding does."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def validate(manifest, version):
    import kubernetes_validate

    problems = []
    try:
        docs = list(yaml.load_all(manifest, Loader=StrictLoader))
    except yaml.YAMLError as e:
        return [f"not valid YAML: {e}"]
    for doc in docs:
        if not doc:
            continue
        name = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if doc.get("apiVersion", "").startswith(CUSTOM_GROUPS):
            print(f"render.py: {name}: custom resource, no schema to validate", file=sys.stderr)
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            problems.append(f"{name}: {'.'.join(map(str, e.path))}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            problems.append(f"{name}: no schema: {e}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chart", type=pathlib.Path)
    parser.add_argument("-f", "--values", action="append", default=[], type=pathlib.Path)
    parser.add_argument("--set-json", action="append", default=[])
    parser.add_argument("--release", default="kepler")
    parser.add_argument("--namespace", default="kepler")
    parser.add_argument("--validate", metavar="K8S_VERSION")
    parser.add_argument("--lint", action="store_true", help="also fail on Helm lint warnings")
    args = parser.parse_args()
    values = {}
    for path in args.values:
        merge(values, yaml.safe_load(path.read_text()) or {})
    for text in args.set_json:
        merge(values, json.loads(text))
    try:
        manifest = render(args.chart.resolve(), args.release, args.namespace, values)
    except RuntimeError as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 1
    problems = lint(args.chart.resolve()) if args.lint else []
    if args.validate:
        problems += validate(manifest, args.validate)
    if problems:
        print("render.py: invalid objects:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    sys.stdout.write(manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
