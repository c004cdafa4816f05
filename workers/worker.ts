/**
 * What every worker shares: it is a Moleculer service marked `settings.worker` (the gateway's /status reports it),
 * it answers /status and /metrics on its spec port (ops-port mixin), and, when it consumes changes, it reads the
 * change stream as its own consumer group (the worker's name), at least once, resuming where it stopped.
 */
import type { ServiceSchema } from "moleculer";
import { configOf } from "../runtime/config";
import { healthBody, HEALTH_ACTION } from "../runtime/health";
import type { OutboxRecord } from "../events/outbox";
import { opsPortMixin } from "../mixins/ops-port.mixin";
import { sharedStream, type ChangeStream, type Consumer } from "../events/stream";

export interface WorkerDef {
	name: string;
	/** Spec port of its /status and /metrics (4010..4070). */
	port: number;
	/** Handles one change event; throwing makes the stream retry it (at least once). Omit for non-consumers. */
	onChange?: (this: any, rec: OutboxRecord) => Promise<void>;
	/**
	 * Handles the change events in batches instead (stream order, up to `maxBatch`); throwing hands the whole batch
	 * back, so it must be idempotent per record. Takes precedence over `onChange`.
	 */
	onChanges?: (this: any, recs: OutboxRecord[]) => Promise<void>;
	maxBatch?: number;
	/**
	 * Production stream (NATS/Redis): events of the group in flight at once (default STREAM_MAX_IN_FLIGHT, 1: stream
	 * order). Only for handlers that do not rely on order; there, in-flight events are what makes a batch.
	 */
	maxInFlight?: number;
	/** Extra dependency checks for /status, e.g. `{ "relational store": true }`. */
	checks?: (this: any) => Promise<Record<string, boolean>>;
}

export function workerService(def: WorkerDef, schema: Partial<ServiceSchema> = {}): ServiceSchema {
	const base: Partial<ServiceSchema> = {
		name: def.name,
		settings: { worker: true, port: def.port },
		actions: {
			[HEALTH_ACTION]: {
				visibility: "public",
				async handler(this: any) {
					const checks: Record<string, boolean> = def.onChange || def.onChanges ? { "event stream": await this.stream.ping().catch(() => false) } : {};
					if (def.checks) Object.assign(checks, await def.checks.call(this).catch(() => ({ [def.name]: false })));
					return healthBody(checks);
				},
			},
		},
		created(this: any) {
			this.stream = sharedStream(configOf(this.broker));
		},
		async started(this: any) {
			if (def.onChanges)
				this.consumer = (await (this.stream as ChangeStream).consumeBatches(def.name, (recs) => def.onChanges!.call(this, recs), { maxBatch: def.maxBatch, maxInFlight: def.maxInFlight })) as Consumer;
			else if (def.onChange) this.consumer = (await this.stream.consume(def.name, (rec: OutboxRecord) => def.onChange!.call(this, rec))) as Consumer;
		},
		async stopped(this: any) {
			await (this.consumer as Consumer | undefined)?.stop();
		},
	};
	// The schema's own lifecycle runs after the base's (mixins first), so the consumer starts before its `started`.
	return { name: def.name, mixins: [opsPortMixin(def.port), base], ...schema } as ServiceSchema;
}
