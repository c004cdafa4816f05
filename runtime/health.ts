/**
 * Health in the spec's shape: `{ status: 'ok' | 'error', info: { <dependency>: { status: 'up' | 'down' } } }`.
 * Dependencies are what this deployment actually uses; each domain service and worker reports its own and the
 * gateway's /status merges them (one entry per dependency, plus one per service and worker), and adds the gateway
 * process's own `event loop` entry: always `up` (a node that answers is alive), with its delay over the last minute.
 *
 * /status answers within a second whatever hangs: each dependency check has CHECK_MS (then it is `down`, `no answer
 * within 500 ms`), a service's checks run at once, and the gateway waits SERVICE_HEALTH_MS for each service (all at
 * once). A service that does not answer in time is `down` with the reason, and so are the dependencies it reported
 * last that no service reported now: a store that hangs every service's check is still named.
 */
import type { ServiceBroker } from "moleculer";
import { DOMAINS } from "../catalog";
import { configOf } from "./config";
import { eventLoopDelay, type LoopDelay } from "./metrics";

/**
 * `kind`: which implementation serves the dependency (`document store`: `postgres`), so an operator reads from /status
 * what a node runs on.
 */
export type DependencyStatus = { status: "up" | "down"; kind?: string; message?: string; delay_ms?: LoopDelay };

/** The `info` key of the gateway's event-loop delay. */
export const EVENT_LOOP = "event loop";
export interface Health {
	status: "ok" | "error";
	info: Record<string, DependencyStatus>;
}

/** The action every domain service and worker exposes (internal, not routed). */
export const HEALTH_ACTION = "health";

/** How long one dependency check may take: then it is `down`, `no answer within 500 ms`. */
export const CHECK_MS = 500;
/** How long the gateway waits for the health of each service (they are asked at once). */
export const SERVICE_HEALTH_MS = 800;

/** `kinds`: the implementation of a dependency, added to its entry (`{ "document store": "postgres" }`). */
export function healthBody(checks: Record<string, boolean>, kinds: Record<string, string | undefined> = {}): Health {
	const info: Record<string, DependencyStatus> = {};
	for (const [k, up] of Object.entries(checks)) info[k] = kinds[k] ? { status: up ? "up" : "down", kind: kinds[k] } : { status: up ? "up" : "down" };
	return { status: Object.values(checks).every(Boolean) ? "ok" : "error", info };
}

/**
 * Runs every check at once, each within `ms`: one that answers false is `down`, one that has not answered by then is
 * `down` with `no answer within <ms> ms` (it is not waited for). `kinds` as for healthBody.
 */
export async function checkHealth(checks: Record<string, () => Promise<boolean>>, kinds: Record<string, string | undefined> = {}, ms = CHECK_MS): Promise<Health> {
	const answers = await Promise.all(
		Object.values(checks).map((check) =>
			withTimeout(
				check().catch(() => false),
				ms,
			),
		),
	);
	const info: Record<string, DependencyStatus> = {};
	Object.keys(checks).forEach((k, i) => {
		const up = answers[i];
		info[k] = { status: up ? "up" : "down", ...(kinds[k] ? { kind: kinds[k] } : {}), ...(up === undefined ? { message: `no answer within ${ms} ms` } : {}) };
	});
	return { status: answers.every(Boolean) ? "ok" : "error", info };
}

/** `p`, or undefined once `ms` went by (a health check, or a stop, does not wait on a dependency that hangs). */
export async function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
	let t: NodeJS.Timeout | undefined;
	try {
		return await Promise.race([p, new Promise<undefined>((resolve) => (t = setTimeout(() => resolve(undefined), ms)))]);
	} finally {
		clearTimeout(t);
	}
}

/** Names of the services whose health the gateway reports: every catalog domain, plus workers that are up. */
export function reportedServices(broker: ServiceBroker): string[] {
	const names = new Set<string>(DOMAINS.map((d) => d.name));
	for (const s of broker.registry.getServiceList({ onlyAvailable: true, skipInternal: true }) as Array<{ name: string; settings?: { worker?: boolean } }>)
		if (s.settings?.worker) names.add(s.name);
	return [...names];
}

/**
 * True when some node offers `action` now. Calling one that is not (yet) registered makes moleculer log a warning
 * per call: a gateway node whose domain services run elsewhere, or have not joined yet, would log one per service on
 * every /status.
 */
export function actionAvailable(broker: ServiceBroker, action: string): boolean {
	const eps = (broker.registry as unknown as { getActionEndpoints(a: string): { hasAvailable(): boolean } | undefined }).getActionEndpoints(action);
	return !!eps && eps.hasAvailable();
}

/**
 * What a node's health check answers when its checks did not finish in time (events/channels.stream.ts): its stalled
 * pipeline stages are added to it. Its dependencies are then named from the service's last full answer.
 */
export const HEALTH_TIMED_OUT: Health = { status: "error", info: { health: { status: "down", message: "health check timed out" } } };

/** Per broker (the gateway's), each service's last full answer: its dependencies are named down when it stops answering. */
const lastAnswers = new WeakMap<object, Map<string, Record<string, DependencyStatus>>>();

/** Why a service has no answer: no node runs it (it then reports on nothing). */
const NO_NODE = "no node offers it";

/** A service's answer: its health, or why there is none. */
async function serviceHealth(broker: ServiceBroker, name: string): Promise<Health | string> {
	if (!actionAvailable(broker, `${name}.${HEALTH_ACTION}`)) return NO_NODE;
	try {
		return (await withTimeout(broker.call(`${name}.${HEALTH_ACTION}`) as Promise<Health>, SERVICE_HEALTH_MS)) ?? `no answer within ${SERVICE_HEALTH_MS} ms`;
	} catch (err) {
		return `health check failed: ${String((err as Error)?.message ?? err).slice(0, 200)}`;
	}
}

export async function collectHealth(broker: ServiceBroker): Promise<Health> {
	const info: Record<string, DependencyStatus> = {};
	const known = lastAnswers.get(broker) ?? new Map<string, Record<string, DependencyStatus>>();
	lastAnswers.set(broker, known);
	/** The dependencies of services that did not answer in full, with the reason: where no answer named them. */
	const unanswered: Record<string, DependencyStatus> = {};
	const unknownNow = (name: string, have: Record<string, DependencyStatus>, why: string) => {
		for (const [dep, s] of Object.entries(known.get(name) ?? {}))
			if (!have[dep]) unanswered[dep] = { status: "down", ...(s.kind ? { kind: s.kind } : {}), message: `${name}: ${why}` };
	};
	await Promise.all(
		reportedServices(broker).map(async (name) => {
			const h = await serviceHealth(broker, name);
			if (typeof h === "string") {
				info[`service:${name}`] = { status: "down", message: h };
				// A service that does not answer may hang on a dependency; one that runs nowhere reports on none.
				if (h !== NO_NODE) unknownNow(name, {}, h);
				return;
			}
			const timedOut = h.info?.health?.message === HEALTH_TIMED_OUT.info.health.message;
			if (timedOut) unknownNow(name, h.info, HEALTH_TIMED_OUT.info.health.message!);
			else known.set(name, h.info ?? {});
			const down = Object.entries(h.info ?? {})
				.filter(([, s]) => s.status === "down")
				.map(([dep]) => dep);
			info[`service:${name}`] = h.status === "ok" ? { status: "up" } : { status: "down", message: down.length ? `down: ${down.join(", ")}` : "reports an error" };
			for (const [dep, s] of Object.entries(h.info ?? {})) if (!info[dep] || s.status === "down") info[dep] = s;
		}),
	);
	for (const [dep, s] of Object.entries(unanswered)) info[dep] ??= s;
	// This node's own stalled pipeline stages (the embedded stream's groups in process; remote ones come in their health).
	for (const [k, s] of Object.entries(pipelineHealth(broker, configOf(broker)))) info[k] = s;
	info[EVENT_LOOP] = { status: "up", delay_ms: eventLoopDelay() };
	return { status: Object.values(info).every((s) => s.status === "up") ? "ok" : "error", info };
}

/**
 * A stage of the event pipeline that has not moved for this long while it should (the relay with events to publish,
 * a consumer group with events waiting or one held) is reported `down` with its reason, on every /status that
 * merges it, and as `platform_pipeline_stalled{stage} 1`. A healthy stage adds no entry.
 */
export const STALL_MS = 10_000;
/** `platform_pipeline_stalled{stage}`: 1 while the stage is stalled. */
export const PIPELINE_STALLED = "platform.pipeline.stalled";
/** `platform_pipeline_lag{stage}`: events waiting for the stage (when it can tell: JetStream consumer groups). */
export const PIPELINE_LAG = "platform.pipeline.lag";

/**
 * What a stage of the pipeline did last and since when it has not moved. `moved()` when it advanced or found
 * nothing to do; `step()` around an await on a dependency (a hung one shows as the step and its duration);
 * `failed()` for an error it will retry.
 */
export class Progress {
	private movedAt = Date.now();
	private steps = new Map<number, { what: string; since: number }>();
	private stepIds = 0;
	private lastError?: string;
	/** Events waiting for this stage, when known. */
	lag?: number;

	constructor(
		readonly stage: string,
		private readonly stallMs = STALL_MS,
		private readonly release: () => void = () => undefined,
	) {}

	moved(): void {
		this.movedAt = Date.now();
		this.lastError = undefined;
	}

	failed(err: unknown): void {
		this.lastError = String((err as Error)?.message ?? err).slice(0, 200);
	}

	async step<T>(what: string, fn: () => Promise<T>): Promise<T> {
		const id = ++this.stepIds;
		this.steps.set(id, { what, since: Date.now() });
		try {
			return await fn();
		} finally {
			this.steps.delete(id);
		}
	}

	/** Undefined while the stage moves; else its reason. */
	stalled(now = Date.now()): string | undefined {
		const idle = now - this.movedAt;
		if (idle < this.stallMs) return undefined;
		const oldest = [...this.steps.values()].sort((a, b) => a.since - b.since)[0];
		const doing = oldest ? `${oldest.what} for ${Math.round((now - oldest.since) / 1000)} s` : undefined;
		const why = [doing, this.lastError && `last error: ${this.lastError}`, this.lag ? `${this.lag} events waiting` : undefined].filter(Boolean).join("; ");
		return `stalled: no progress for ${Math.round(idle / 1000)} s${why ? ` (${why})` : ""}`;
	}

	close(): void {
		this.release();
	}
}

const stages = new WeakMap<object, Set<Progress>>();

/** A stage of the pipeline of `owner` (the node's configuration object), reported by `pipelineHealth` until closed. */
export function trackProgress(owner: object, stage: string, stallMs?: number): Progress {
	let set = stages.get(owner);
	if (!set) stages.set(owner, (set = new Set()));
	const all = set;
	const p: Progress = new Progress(stage, stallMs, () => all.delete(p));
	all.add(p);
	return p;
}

const gauges = new WeakSet<object>();

/**
 * The stalled stages of `owner` as /status entries (none when every stage moves), and the pipeline gauges of
 * `broker` brought up to date.
 */
export function pipelineHealth(broker: ServiceBroker, owner: object): Record<string, DependencyStatus> {
	const out: Record<string, DependencyStatus> = {};
	const metrics = broker.isMetricsEnabled() ? broker.metrics : undefined;
	if (metrics && !gauges.has(broker)) {
		gauges.add(broker);
		metrics.register({
			type: "gauge",
			name: PIPELINE_STALLED,
			labelNames: ["stage"],
			description: "1 while a stage of the event pipeline has not moved for its stall time while it should",
		} as never);
		metrics.register({
			type: "gauge",
			name: PIPELINE_LAG,
			labelNames: ["stage"],
			description: "Events waiting for a stage of the event pipeline (JetStream consumer groups)",
		} as never);
	}
	const now = Date.now();
	for (const p of stages.get(owner) ?? []) {
		const reason = p.stalled(now);
		if (reason) out[p.stage] = { status: "down", message: reason };
		metrics?.set(PIPELINE_STALLED, reason ? 1 : 0, { stage: p.stage });
		if (p.lag !== undefined) metrics?.set(PIPELINE_LAG, p.lag, { stage: p.stage });
	}
	return out;
}

/** `health` with `extra` entries merged in (a down entry wins over an up one of the same name). */
export function withEntries(health: Health, extra: Record<string, DependencyStatus>): Health {
	if (!Object.keys(extra).length) return health;
	const info = { ...health.info };
	for (const [k, s] of Object.entries(extra)) if (!info[k] || s.status === "down") info[k] = s;
	return { status: Object.values(info).every((s) => s.status === "up") ? "ok" : "error", info };
}
