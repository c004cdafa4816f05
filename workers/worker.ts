/**
 * What every worker shares: it is a Moleculer service marked `settings.worker` (the gateway's /status reports it),
 * it answers /status and /metrics on its spec port (ops-port mixin), and, when it consumes changes, it reads the
 * change stream as its own consumer group (the worker's name), at least once, resuming where it stopped.
 */
import type { Service, ServiceSchema } from "moleculer";
import { configOf } from "../runtime/config";
import { checkHealth, HEALTH_ACTION } from "../runtime/health";
import type { OutboxRecord } from "../events/outbox";
import { opsPortMixin } from "../engine/ops-port.mixin";
import { sharedStream, type ChangeStream, type Consumer } from "../events/stream";
import { asSchema, type ServiceOf } from "../lib/service";

/** What the base part of every worker keeps on `this`. */
type WorkerThis = Service & { stream: ChangeStream; consumer?: Consumer };

/** A worker; `T` is its service's `this` (lib/service.ts), which its handlers see. */
export interface WorkerDef<T extends Service = Service> {
	name: string;
	/** Spec port of its /status and /metrics (4010..4070). */
	port: number;
	/** Handles one change event; throwing makes the stream retry it (at least once). Omit for non-consumers. */
	onChange?: (this: T, rec: OutboxRecord) => Promise<void>;
	/**
	 * Handles the change events in batches instead (stream order, up to `maxBatch`); throwing hands the whole batch
	 * back, so it must be idempotent per record. Takes precedence over `onChange`.
	 */
	onChanges?: (this: T, recs: OutboxRecord[]) => Promise<void>;
	maxBatch?: number;
	/**
	 * Production stream (NATS/Redis): events of the group in flight at once (default STREAM_MAX_IN_FLIGHT, 1: stream
	 * order). Only for handlers that do not rely on order; there, in-flight events are what makes a batch.
	 */
	maxInFlight?: number;
	/**
	 * Extra dependency checks for /status, e.g. `{ "relational store": () => db.ping() }`: each runs within CHECK_MS
	 * (runtime/health.ts), at the same time as the others.
	 */
	checks?: (this: T) => Record<string, () => Promise<boolean>>;
}

export function workerService<T extends Service = Service>(def: WorkerDef<T>, schema: ServiceOf<T> = {}): ServiceSchema {
	// The worker's `this` is one object: this base's state and the worker's own (`T`).
	const own = (svc: WorkerThis) => svc as unknown as T;
	const base: ServiceOf<WorkerThis> = {
		name: def.name,
		settings: { worker: true, port: def.port },
		actions: {
			[HEALTH_ACTION]: {
				visibility: "public",
				handler(this: WorkerThis) {
					const checks: Record<string, () => Promise<boolean>> = def.onChange || def.onChanges ? { "event stream": () => this.stream.ping() } : {};
					try {
						Object.assign(checks, def.checks?.call(own(this)));
					} catch {
						checks[def.name] = async () => false;
					}
					return checkHealth(checks);
				},
			},
		},
		created(this: WorkerThis) {
			this.stream = sharedStream(configOf(this.broker));
		},
		async started(this: WorkerThis) {
			if (def.onChanges)
				this.consumer = (await this.stream.consumeBatches(def.name, (recs) => def.onChanges!.call(own(this), recs), {
					maxBatch: def.maxBatch,
					maxInFlight: def.maxInFlight,
				})) as Consumer;
			else if (def.onChange) this.consumer = (await this.stream.consume(def.name, (rec: OutboxRecord) => def.onChange!.call(own(this), rec))) as Consumer;
		},
		async stopped(this: WorkerThis) {
			await this.consumer?.stop();
		},
	};
	// The schema's own lifecycle runs after the base's (mixins first), so the consumer starts before its `started`.
	return Object.assign({ name: def.name, mixins: [opsPortMixin(def.port), asSchema(base)] }, asSchema(schema));
}
