// Validation and encoding rules shared with the Python SDK (utils.py): the
// same inputs are accepted and refused, with the same wording where it helps.
import { randomBytes } from "node:crypto";
import { isIP, isIPv6 } from "node:net";
import { posix } from "node:path";

import { CLAIM_NAME_PREFIX } from "./constants.js";

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const HOST_LABEL = /^[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?$/;
const NUMERIC_LABEL = /^(0[xX][0-9a-fA-F]*|[0-9]+)$/;

export function isDnsLabel(value: unknown): value is string {
  return typeof value === "string" && DNS_LABEL.test(value);
}

export function isDnsSubdomain(value: unknown): value is string {
  return typeof value === "string" && value.length > 0 && value.length <= 253 && DNS_SUBDOMAIN.test(value);
}

export function validateNamespace(namespace: unknown): string {
  if (!isDnsLabel(namespace)) {
    throw new TypeError(
      `Invalid namespace ${JSON.stringify(namespace)}: a namespace must be a lower-case RFC 1123 label ` +
        "(a-z, 0-9 and '-', at most 63 characters).",
    );
  }
  return namespace;
}

export function validateLabelKey(key: unknown): void {
  if (typeof key !== "string" || key === "") {
    throw new TypeError(`Invalid label key ${JSON.stringify(key)}: keys must be non-empty strings.`);
  }
  const slash = key.lastIndexOf("/");
  if (slash >= 0) {
    const prefix = key.slice(0, slash);
    if (!prefix || prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix)) {
      throw new TypeError(`Invalid label key ${JSON.stringify(key)}: the prefix must be a DNS subdomain.`);
    }
  }
  const name = key.slice(slash + 1);
  if (!LABEL_NAME.test(name)) {
    throw new TypeError(
      `Invalid label key ${JSON.stringify(key)}: the name part must be at most 63 characters of ` +
        "[A-Za-z0-9-_.], starting and ending with an alphanumeric character.",
    );
  }
}

export function validateLabels(labels: Record<string, string> | undefined): Record<string, string> {
  if (labels === undefined) return {};
  if (labels === null || typeof labels !== "object" || Array.isArray(labels)) {
    throw new TypeError("labels must be an object mapping strings to strings.");
  }
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(labels)) {
    validateLabelKey(key);
    if (typeof value !== "string") {
      throw new TypeError(`Invalid value for label ${JSON.stringify(key)}: ${String(value)} is not a string.`);
    }
    if (value !== "" && !LABEL_NAME.test(value)) {
      throw new TypeError(
        `Invalid value ${JSON.stringify(value)} for label ${JSON.stringify(key)}: values must be empty or at most 63 ` +
          "characters of [A-Za-z0-9-_.], starting and ending with an alphanumeric character.",
      );
    }
    out[key] = value;
  }
  return out;
}

export function validateAnnotations(annotations: Record<string, string> | undefined): Record<string, string> {
  if (annotations === undefined) return {};
  if (annotations === null || typeof annotations !== "object" || Array.isArray(annotations)) {
    throw new TypeError("podAnnotations must be an object mapping strings to strings.");
  }
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(annotations)) {
    validateLabelKey(key);
    if (typeof value !== "string") {
      throw new TypeError(`Invalid value for annotation ${JSON.stringify(key)}: ${String(value)} is not a string.`);
    }
    out[key] = value;
  }
  return out;
}

/** Environment variable names the claim may carry (C identifier rules, as the controller checks). */
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function validateEnv(env: Record<string, string> | undefined): { name: string; value: string }[] {
  if (env === undefined) return [];
  if (env === null || typeof env !== "object" || Array.isArray(env)) {
    throw new TypeError("env must be an object mapping variable names to string values.");
  }
  return Object.entries(env).map(([name, value]) => {
    if (!ENV_NAME.test(name)) {
      throw new TypeError(`Invalid environment variable name ${JSON.stringify(name)}.`);
    }
    if (typeof value !== "string") {
      throw new TypeError(`Invalid value for environment variable ${name}: ${String(value)} is not a string.`);
    }
    return { name, value };
  });
}

export function validateShutdownAfterSeconds(value: unknown): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw new TypeError(
      `shutdownAfterSeconds must be a positive integer number of seconds, got ${JSON.stringify(value)}.`,
    );
  }
  if (value <= 0) throw new TypeError(`shutdownAfterSeconds must be positive, got ${value}.`);
  return value;
}

export function validatePort(port: unknown, what = "port"): number {
  if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new TypeError(`${what} must be an integer between 1 and 65535, got ${JSON.stringify(port)}.`);
  }
  return port;
}

/** A fresh claim name: `sandbox-claim-` followed by 8 hex characters. */
export function generateClaimName(): string {
  return CLAIM_NAME_PREFIX + randomBytes(4).toString("hex");
}

/** `now + seconds` in UTC as `%Y-%m-%dT%H:%M:%SZ` (no fractional seconds). */
export function shutdownTimeAfter(seconds: number, now: Date = new Date()): string {
  const when = new Date(now.getTime() + seconds * 1000);
  return when.toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** The current UTC time in ISO 8601 with an explicit offset, as Python's isoformat() writes it. */
export function utcNowIso(now: Date = new Date()): string {
  const micros = String(now.getUTCMilliseconds() * 1000).padStart(6, "0");
  return now.toISOString().replace(/\.\d{3}Z$/, `.${micros}+00:00`);
}

/**
 * Normalise a sandbox path for files.write/read: no control characters, not
 * blank or `.`, no `..` segment; `//` and `./` collapsed, the leading `/`
 * stripped so the path is relative to the workspace.
 */
export function sanitizePath(path: unknown): string {
  if (typeof path !== "string") throw new TypeError(`path must be a string, got ${typeof path}.`);
  for (const ch of path) {
    const code = ch.codePointAt(0) ?? 0;
    if (code < 0x20 || code === 0x7f) {
      throw new TypeError(`Invalid path ${JSON.stringify(path)}: control characters are not allowed.`);
    }
  }
  if (path.trim() === "" || path.trim() === ".") {
    throw new TypeError(`Invalid path ${JSON.stringify(path)}: the path must name a file.`);
  }
  if (path.split("/").includes("..")) {
    throw new TypeError(
      `Invalid path ${JSON.stringify(path)}: '..' segments are not allowed ` +
        "(pass allowUnsafePaths: true to send the path unchanged).",
    );
  }
  const normalized = posix.normalize(path).replace(/^\/+/, "").replace(/\/+$/, "");
  if (normalized === "" || normalized === ".") {
    throw new TypeError(`Invalid path ${JSON.stringify(path)}: the path must name a file, not the workspace root.`);
  }
  return normalized;
}

/** Reject a missing path for list/exists/delete (these send it unsanitised). */
export function checkPath(path: unknown): string {
  if (typeof path !== "string" || path === "") throw new TypeError("path must be a non-empty string");
  return path;
}

/**
 * Percent-encode `path` as one URL segment: every byte outside
 * `A-Za-z0-9-_~` is encoded, `/` and `.` included, so `.`/`..` never form dot
 * segments a router would redirect.
 */
export function encodePath(path: string): string {
  return encodeURIComponent(path).replace(/[!'()*.]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
}

/** The X-Sandbox-Timeout value for a timeout in seconds, or undefined. */
export function timeoutHeaderValue(timeout: unknown): string | undefined {
  if (typeof timeout !== "number" || !Number.isFinite(timeout) || timeout <= 0) return undefined;
  return Number.isInteger(timeout) ? `${timeout}` : String(timeout);
}

/** Bracket IPv6 literals for use in a URL authority. */
export function formatHost(host: string): string {
  return isIPv6(host) ? `[${host}]` : host;
}

/** The first IPv4 pod IP (IPv4-mapped IPv6 counts), else the first IPv6 one. */
export function selectPodIp(podIps: unknown): string | undefined {
  if (!Array.isArray(podIps)) return undefined;
  let firstV6: string | undefined;
  for (const entry of podIps) {
    const raw: unknown = typeof entry === "object" && entry !== null ? (entry as { ip?: unknown }).ip : entry;
    if (typeof raw !== "string") continue;
    const ip = raw.trim();
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
    if (mapped && isIP(mapped[1] ?? "") === 4) return mapped[1];
    const family = isIP(ip);
    if (family === 4) return ip;
    if (family === 6 && firstV6 === undefined) firstV6 = ip;
  }
  return firstV6;
}

/**
 * A URL-ready host for a Gateway `status.addresses[].value`, or undefined:
 * IP literals (IPv6 bracketed) and DNS hostnames; refuses URL metacharacters,
 * bad labels and hostnames whose labels are all numeric/hex (disguised IPs).
 */
export function validateGatewayAddress(value: unknown): string | undefined {
  if (typeof value !== "string") return undefined;
  const host = value.trim();
  if (!host || /[/?#@]/.test(host)) return undefined;
  if (isIP(host)) return formatHost(host);
  if (host.length > 253) return undefined;
  const labels = (host.endsWith(".") ? host.slice(0, -1) : host).split(".");
  if (!labels.every((l) => HOST_LABEL.test(l))) return undefined;
  if (labels.every((l) => NUMERIC_LABEL.test(l))) return undefined;
  return host;
}
