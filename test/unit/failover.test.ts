import { Errors } from "moleculer";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "fs";
import os from "os";
import path from "path";
import { spawnSync } from "child_process";
import { claimNodeId, isIdempotent, maybeRan, neverRan, stableNodeId, transportFailure } from "../../runtime/failover";
import { ApiError, DEFAULT_RETRY_AFTER_S, retryAfterOf, toErrorBody } from "../../lib/errors";
import { readConfig } from "../../runtime/config";

const base = { services: ["content"], dataDir: "/srv/a", port: 3010, opsPortOffset: 0 };

describe("stableNodeId", () => {
	test("the same settings give the same id, across restarts", () => {
		expect(stableNodeId(base, "host1")).toBe(stableNodeId({ ...base }, "host1"));
		expect(stableNodeId(base, "host1")).toMatch(/^host1-[0-9a-f]{8}$/);
		// Order and repeats of SERVICES do not matter.
		expect(stableNodeId({ ...base, services: ["logistic", "content"] }, "h")).toBe(stableNodeId({ ...base, services: ["content", "logistic", "content"] }, "h"));
	});
	test("two replicas of one host differ by DATA_DIR or OPS_PORT_OFFSET; hosts differ by name", () => {
		const ids = new Set([
			stableNodeId(base, "h"),
			stableNodeId({ ...base, dataDir: "/srv/b" }, "h"),
			stableNodeId({ ...base, opsPortOffset: 100 }, "h"),
			stableNodeId(base, "h2"),
			stableNodeId({ ...base, services: undefined }, "h"),
		]);
		expect(ids.size).toBe(5);
	});
	test("PORT matters for a gateway only", () => {
		expect(stableNodeId({ ...base, port: 4000 }, "h")).toBe(stableNodeId(base, "h"));
		const api = { ...base, services: ["api"] };
		expect(stableNodeId({ ...api, port: 4000 }, "h")).not.toBe(stableNodeId(api, "h"));
	});
});

describe("claimNodeId", () => {
	let dataDir = "";
	beforeEach(() => (dataDir = mkdtempSync(path.join(os.tmpdir(), "claim-"))));
	afterEach(() => rmSync(dataDir, { recursive: true, force: true }));
	const cfg = () => ({ ...base, dataDir });
	const pidFile = () => path.join(dataDir, `node-${stableNodeId(cfg(), "h")}.pid`);

	test("the first process takes the stable id and records itself; a restart (same or dead pid) takes it again", () => {
		expect(claimNodeId(cfg(), "h", process.pid)).toBe(stableNodeId(cfg(), "h"));
		expect(readFileSync(pidFile(), "utf8")).toBe(String(process.pid));
		expect(claimNodeId(cfg(), "h", process.pid)).toBe(stableNodeId(cfg(), "h"));
		// A process that has exited: its claim is stale.
		const dead = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"]).stdout.toString();
		writeFileSync(pidFile(), dead);
		expect(claimNodeId(cfg(), "h", 4242)).toBe(stableNodeId(cfg(), "h"));
		expect(readFileSync(pidFile(), "utf8")).toBe("4242");
	});
	test("a second live process with the same settings gets <hostname>-<pid>, and leaves the claim alone", () => {
		writeFileSync(pidFile(), String(process.pid));
		const warn = jest.spyOn(process, "emitWarning").mockImplementation(() => undefined);
		expect(claimNodeId(cfg(), "h", 999_999)).toBe("h-999999");
		expect(warn).toHaveBeenCalledWith(expect.stringMatching(/is held by process \d+/));
		warn.mockRestore();
		expect(readFileSync(pidFile(), "utf8")).toBe(String(process.pid));
	});
});

describe("which failed calls may run again", () => {
	const A = "content.notes.create";
	test("never ran: no node, not published, refused by a stopping node", () => {
		expect(neverRan(new Errors.ServiceNotAvailableError({ action: A }), A, "gw")).toBe(true);
		expect(neverRan(new Errors.ServiceNotFoundError({ action: A }), A, "gw")).toBe(true);
		expect(neverRan(new (Errors as any).BrokerDisconnectedError(), A, "gw")).toBe(true);
		const stopping = Object.assign(new Errors.ServiceNotAvailableError({ action: A, nodeID: "b" }), { nodeID: "b" });
		expect(neverRan(stopping, A, "gw")).toBe(true);
	});
	test("the same errors raised by a call the action made itself prove nothing", () => {
		const nested = Object.assign(new Errors.ServiceNotAvailableError({ action: "identity.users.get" }), { nodeID: "b" });
		expect(neverRan(nested, A, "gw")).toBe(false);
		expect(neverRan(new Errors.ServiceNotAvailableError({ action: "identity.users.get" }), A, "gw")).toBe(false);
		expect(neverRan(Object.assign(new (Errors as any).BrokerDisconnectedError(), { nodeID: "b" }), A, "gw")).toBe(false);
		expect(maybeRan(Object.assign(new Errors.RequestTimeoutError({ action: "identity.users.get", nodeID: "b" }), { nodeID: "b" }), A)).toBe(false);
	});
	test("cut off or timed out: may have run", () => {
		expect(neverRan(new Errors.RequestRejectedError({ action: A, nodeID: "b" }), A, "gw")).toBe(false);
		expect(maybeRan(new Errors.RequestRejectedError({ action: A, nodeID: "b" }), A)).toBe(true);
		expect(maybeRan(new Errors.RequestTimeoutError({ action: A, nodeID: "b" }), A)).toBe(true);
		// The callee's own distributed timeout, sent back (regenerated with the callee's node id).
		expect(maybeRan(Object.assign(new Errors.RequestTimeoutError({ action: A, nodeID: "gw" }), { nodeID: "b" }), A)).toBe(true);
		expect(maybeRan(new ApiError(503, "cache unavailable"), A)).toBe(false);
		expect(neverRan(new ApiError(503, "cache unavailable"), A, "gw")).toBe(false);
	});
	test("idempotent: reads and actions that say so", () => {
		expect(isIdempotent({ collection: { level: "read" } })).toBe(true);
		expect(isIdempotent({ collection: { level: "write" } })).toBe(false);
		expect(isIdempotent({ idempotent: true })).toBe(true);
		expect(isIdempotent({})).toBe(false);
		expect(isIdempotent(undefined)).toBe(false);
	});
	test("the circuit breaker counts failures of the path, not of the action", () => {
		expect(transportFailure(new Errors.RequestTimeoutError({ action: A, nodeID: "b" }))).toBe(true);
		expect(transportFailure(new Errors.RequestRejectedError({ action: A, nodeID: "b" }))).toBe(true);
		expect(transportFailure(new ApiError(500, "x"))).toBe(false);
		expect(transportFailure(new ApiError(404, "document not found"))).toBe(false);
	});
});

describe("503/504 bodies name no action and no node", () => {
	const A = "content.notes.create";
	test.each([
		[new Errors.RequestRejectedError({ action: A, nodeID: "vm-25317" }), 503, "service unavailable", "Service Unavailable"],
		[new Errors.ServiceNotAvailableError({ action: A, nodeID: "vm-25317" }), 503, "service unavailable", "Service Unavailable"],
		[new Errors.ServiceNotFoundError({ action: A, nodeID: "vm-25317" }), 503, "service unavailable", "Service Unavailable"],
		[new (Errors as any).BrokerDisconnectedError(), 503, "service unavailable", "Service Unavailable"],
		[new Errors.QueueIsFullError({ action: A, nodeID: "vm-25317" }), 503, "service unavailable", "Service Unavailable"],
		[new Errors.RequestTimeoutError({ action: A, nodeID: "vm-25317" }), 504, "request timed out", "Gateway Timeout"],
		[new Errors.RequestSkippedError({ action: A, nodeID: "vm-25317" }), 504, "request timed out", "Gateway Timeout"],
		[new Errors.MoleculerServerError(`Service '${A}' failed on 'vm-25317'`, 503), 503, "service unavailable", "Service Unavailable"],
	])("error %# answers %i %s", (err, statusCode, message, error) => {
		const body = toErrorBody(err);
		expect(body).toEqual({ statusCode, message, error });
		expect(JSON.stringify(body)).not.toMatch(/content|vm-25317/);
	});
	test("a 503 the platform raised on purpose keeps its message", () => {
		expect(toErrorBody(new ApiError(503, "cache unavailable"))).toEqual({ statusCode: 503, message: "cache unavailable", error: "Service Unavailable" });
	});
	test("Retry-After of a node that could not be reached: the heartbeat timeout, in whole seconds, for 503 and 504", () => {
		const gone = new Errors.RequestRejectedError({ action: A, nodeID: "b" });
		expect(retryAfterOf(gone, 503, 3000)).toBe(3);
		expect(retryAfterOf(new Errors.RequestTimeoutError({ action: A, nodeID: "b" }), 504, 2500)).toBe(3);
		expect(retryAfterOf(gone, 503, 200)).toBe(1);
		// Other 503s keep their own (or the default).
		expect(retryAfterOf(new ApiError(503, "cache unavailable"), 503, 3000)).toBe(DEFAULT_RETRY_AFTER_S);
		expect(retryAfterOf(gone, 500, 3000)).toBeUndefined();
		expect(retryAfterOf(gone, 429, 3000)).toBeUndefined();
	});
});

describe("failover settings", () => {
	const keys = ["HEARTBEAT_INTERVAL_MS", "HEARTBEAT_TIMEOUT_MS", "REQUEST_TIMEOUT_MS", "FAILOVER_WAIT_MS"];
	const saved = Object.fromEntries(keys.map((k) => [k, process.env[k]]));
	afterEach(() => {
		for (const k of keys)
			if (saved[k] === undefined) delete process.env[k];
			else process.env[k] = saved[k];
	});
	const set = (env: Record<string, string>) => {
		for (const k of keys) delete process.env[k];
		Object.assign(process.env, env);
	};
	test("defaults: heartbeats every second, dropped after 3 s, calls time out after 30 s, wait 5 s for a node", () => {
		set({});
		expect(readConfig()).toMatchObject({ heartbeatIntervalMs: 1000, heartbeatTimeoutMs: 3000, requestTimeoutMs: 30_000, failoverWaitMs: 5000 });
	});
	test("a longer interval raises the default timeout with it", () => {
		set({ HEARTBEAT_INTERVAL_MS: "5000" });
		expect(readConfig()).toMatchObject({ heartbeatIntervalMs: 5000, heartbeatTimeoutMs: 11_000 });
	});
	test.each([
		[{ HEARTBEAT_INTERVAL_MS: "500" }, "HEARTBEAT_INTERVAL_MS must be an integer of milliseconds, at least 1000, got 500"],
		[{ HEARTBEAT_INTERVAL_MS: "2000", HEARTBEAT_TIMEOUT_MS: "4000" }, "HEARTBEAT_TIMEOUT_MS must be at least twice HEARTBEAT_INTERVAL_MS plus 1000 (5000), got 4000"],
		[{ REQUEST_TIMEOUT_MS: "1.5" }, "REQUEST_TIMEOUT_MS must be an integer of milliseconds, at least 100, got 1.5"],
		[{ FAILOVER_WAIT_MS: "-1" }, "FAILOVER_WAIT_MS must be an integer of milliseconds, at least 0, got -1"],
	])("%j refuses to start", (env, message) => {
		set(env);
		expect(() => readConfig()).toThrow(message);
	});
});
