/**
 * Health in the spec's shape: `{ status: 'ok' | 'error', info: { <dependency>: { status: 'up' | 'down' } } }`.
 * Dependencies are what this deployment actually uses; each domain service and worker reports its own and the
 * gateway's /status merges them (one entry per dependency, plus one per service and worker), and adds the gateway
 * process's own `event loop` entry: always `up` (a node that answers is alive), with its delay over the last minute.
 */
import type { ServiceBroker } from "moleculer";
import { DOMAINS } from "../catalog";
import { eventLoopDelay, type LoopDelay } from "./metrics";

export type DependencyStatus = { status: "up" | "down"; message?: string; delay_ms?: LoopDelay };

/** The `info` key of the gateway's event-loop delay. */
export const EVENT_LOOP = "event loop";
export interface Health {
	status: "ok" | "error";
	info: Record<string, DependencyStatus>;
}

/** The action every domain service and worker exposes (internal, not routed). */
export const HEALTH_ACTION = "health";

export function healthBody(checks: Record<string, boolean>): Health {
	const info: Record<string, DependencyStatus> = {};
	for (const [k, up] of Object.entries(checks)) info[k] = { status: up ? "up" : "down" };
	return { status: Object.values(checks).every(Boolean) ? "ok" : "error", info };
}

async function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
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

export async function collectHealth(broker: ServiceBroker): Promise<Health> {
	const info: Record<string, DependencyStatus> = {};
	await Promise.all(
		reportedServices(broker).map(async (name) => {
			let h: Health | undefined;
			try {
				if (actionAvailable(broker, `${name}.${HEALTH_ACTION}`)) h = await withTimeout(broker.call(`${name}.${HEALTH_ACTION}`) as Promise<Health>, 2000);
			} catch {
				h = undefined;
			}
			info[`service:${name}`] = { status: h?.status === "ok" ? "up" : "down" };
			for (const [dep, s] of Object.entries(h?.info ?? {})) if (!info[dep] || s.status === "down") info[dep] = s;
		}),
	);
	info[EVENT_LOOP] = { status: "up", delay_ms: eventLoopDelay() };
	return { status: Object.values(info).every((s) => s.status === "up") ? "ok" : "error", info };
}
