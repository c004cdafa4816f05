/**
 * The collection engine's service lifecycle: its per-instance state (the collections' revisioned stores, the outbox,
 * the idempotency store), connected in `started` (one store per collection) and released in `stopped`, and its health
 * action over the stores, the event stream and the cache.
 */
import type { ActionSchema } from "moleculer";
import type { DomainDef } from "../catalog";
import { configOf } from "../runtime/config";
import { sharedOutbox, type Outbox } from "../events/outbox";
import { createStore, type DocumentStore } from "../stores";
import { checkHealth } from "../runtime/health";
import { sharedKeyValue } from "../runtime/kv";
import type { ServiceOf } from "../lib/service";
import { IdempotencyStoreRef } from "./idempotency-record";
import { revisioned } from "../stores/revision";
import type { EngineService } from "./collection-contract";

export interface EngineState {
	stores: Map<string, DocumentStore>;
	outbox: Outbox;
	idempotency: IdempotencyStoreRef;
}

/** The engine's `this` (lib/service.ts): its methods, and its stores and outbox once started. */
export type Engine = EngineService & { $engine?: EngineState };

// Stores and outbox belong to the service instance (not to the mixin's closure): several brokers in one process
// (tests, the REPL) each get their own.
export const state = (svc: unknown) => (svc as Engine).$engine!;

/** The engine's health action (HEALTH_ACTION): its stores, the event stream and the cache answer. */
export const healthAction: ActionSchema = {
	visibility: "public",
	handler(this: Engine) {
		const { stores, outbox } = state(this);
		const cfg = configOf(this.broker);
		return checkHealth(
			{
				"document store": async () => stores.size > 0 && (await Promise.all([...stores.values()].map((s) => s.ping().catch(() => false)))).every(Boolean),
				"event stream": () => outbox.ping(),
				cache: () => sharedKeyValue(cfg.redisUrl, cfg.redisPrefix).ping(),
			},
			{ "document store": [...stores.values()][0]?.kind },
		);
	},
};

/** `started` connects the outbox and one revisioned store per collection of `domain`; `stopped` releases them. */
export function engineLifecycle(domain: DomainDef): Pick<ServiceOf<Engine>, "started" | "stopped"> {
	return {
		async started(this: Engine) {
			const cfg = configOf(this.broker);
			const st: EngineState = { stores: new Map(), outbox: sharedOutbox(cfg), idempotency: new IdempotencyStoreRef(cfg) };
			this.$engine = st;
			await st.outbox.connect();
			for (const col of domain.collections) {
				const raw = createStore(
					cfg,
					`${domain.name}/${col.name}`,
					Object.keys(col.fields).filter((f) => col.fields[f].relation),
				);
				await raw.connect();
				// Every write through it stores a new revision (the document's ETag, stores/revision.ts).
				st.stores.set(col.name, revisioned(raw));
			}
		},
		async stopped(this: Engine) {
			const st = this.$engine;
			if (!st) return;
			for (const s of st.stores.values()) await s.disconnect();
			st.stores.clear();
			await st.idempotency.release();
			await st.outbox.disconnect();
		},
	};
}
