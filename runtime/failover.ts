/**
 * Failover rules (docs/production.md, "Failover"): which node id a node takes when NODE_ID is unset, and which failed
 * calls may be sent again to another node without risking a second execution.
 */
import { createHash } from "crypto";
import { readFileSync, writeFileSync } from "fs";
import os from "os";
import path from "path";
import type { PlatformConfig } from "./config";
import { alive } from "./pids";

/**
 * The same id across restarts, so peers recognise a restarted node at once (its INFO carries a new instance) instead
 * of keeping a dead `<hostname>-<pid>` registered until its heartbeats are missed. Two nodes of one host differ by
 * what they run and where they keep data (two replicas never share a DATA_DIR: the embedded PostgreSQL belongs to one
 * process; replicas on one host also differ in PORT or OPS_PORT_OFFSET). Should two nodes still share an
 * id, Moleculer stops the one that sees the other's INFO ("nodeID conflict"): loud, never two nodes on one request subject.
 */
export function stableNodeId(cfg: Pick<PlatformConfig, "services" | "dataDir" | "port" | "opsPortOffset">, hostname = os.hostname()): string {
	const services = cfg.services ? [...new Set(cfg.services)].sort().join(",") : "*";
	const gateway = !cfg.services || cfg.services.includes("api");
	const key = JSON.stringify([services, cfg.dataDir, gateway ? cfg.port : null, cfg.opsPortOffset]);
	return `${hostname}-${createHash("sha256").update(key).digest("hex").slice(0, 8)}`;
}

/**
 * The stable id, claimed in DATA_DIR (`node-<id>.pid`): a second live process of this host with the very same
 * settings (the same DATA_DIR, a node started twice by mistake, the REPL beside a running node) takes `<hostname>-<pid>`
 * instead of stopping the first through Moleculer's conflict check. A claim left by a dead process, or by this one
 * (a restart in the same process, a container's pid 1 again), is taken over.
 */
export function claimNodeId(cfg: Parameters<typeof stableNodeId>[0], hostname = os.hostname(), pid = process.pid): string {
	const id = stableNodeId(cfg, hostname);
	const file = path.join(cfg.dataDir, `node-${id}.pid`);
	let holder = 0;
	try {
		holder = Number(readFileSync(file, "utf8").trim());
	} catch {
		/* no claim yet */
	}
	if (holder > 0 && holder !== pid && alive(holder)) {
		process.emitWarning(`node id ${id} is held by process ${holder} (same settings, same DATA_DIR): this node is ${hostname}-${pid}`);
		return `${hostname}-${pid}`;
	}
	try {
		writeFileSync(file, String(pid), { mode: 0o600 });
	} catch {
		/* a read-only DATA_DIR: the id without the claim */
	}
	return id;
}

interface CallError {
	name?: string;
	nodeID?: string;
	data?: { action?: string; nodeID?: string };
}

/** Failures of the call itself (not of the action) where the request may have run on the node that went away. */
const MAYBE_RAN = new Set(["RequestRejectedError", "RequestTimeoutError"]);

/**
 * The request never reached an action handler: this broker found no node for it, could not publish it, or the node
 * refused it while stopping (before running it). Only when the error names this very call: the same error raised by
 * a call the action made itself says nothing about whether the action wrote.
 */
export function neverRan(err: unknown, action: string, localNodeId: string): boolean {
	const e = err as CallError | undefined;
	if (!e?.name) return false;
	const local = e.nodeID === undefined || e.nodeID === localNodeId;
	if (e.name === "BrokerDisconnectedError") return local;
	if (e.name === "ServiceNotFoundError" || e.name === "QueueIsFullError") return local && e.data?.action === action;
	// A stopping node answers a request it will not run with ServiceNotAvailableError naming itself and the action.
	if (e.name === "ServiceNotAvailableError") return e.data?.action === action && (local || e.data?.nodeID === e.nodeID);
	return false;
}

/**
 * Timed out or cut off by the node's disconnection, for this very action: raised by this broker, or by the callee (a
 * distributed timeout: the callee stops waiting for its own handler when the caller's deadline passes).
 */
export function maybeRan(err: unknown, action: string): boolean {
	const e = err as CallError | undefined;
	return !!e?.name && MAYBE_RAN.has(e.name) && e.data?.action === action;
}

/** Reads (a collection's `read` level) and actions that declare `idempotent: true` may run twice. */
export function isIdempotent(def: { collection?: { level?: string }; idempotent?: boolean } | undefined): boolean {
	return def?.idempotent === true || def?.collection?.level === "read";
}

/** A failure of the path to a node rather than of the action: what the circuit breaker counts. */
export function transportFailure(err: unknown): boolean {
	const name = (err as CallError | undefined)?.name;
	return name === "RequestTimeoutError" || name === "RequestRejectedError" || name === "BrokerDisconnectedError";
}
