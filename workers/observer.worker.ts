/**
 * observer (4020): counts every create, update, delete and restore per service and collection into special/stats,
 * in daily, monthly and yearly UTC buckets, per tenant (see lib/stat-buckets.ts and services/special.service.ts
 * `stats.increment`). It reads the change stream as consumer group `observer`, at least once; the special service
 * remembers the positions it counted per bucket, so a redelivered event never counts twice.
 */
import type { ServiceBroker } from "moleculer";
import type { OutboxRecord } from "../events/outbox";
import { WORKER_PORTS } from "./index";
import { workerService } from "./worker";
import { counterOf, STATS_TOPIC } from "../lib/stat-buckets";
import type { StatsIncrement } from "../services/special.service";

/** Handles one change record; throws (the stream retries) when special/stats cannot be written. */
export async function observe(broker: ServiceBroker, rec: OutboxRecord): Promise<{ applied: number; skipped: number } | null> {
	const ev = rec.event;
	// Writes to the statistics themselves are never counted: no feedback loop even if something records them.
	if (!ev || ev.topic === STATS_TOPIC) return null;
	const counter = counterOf(ev);
	if (!counter) return null;
	const params: StatsIncrement = {
		seq: rec.seq,
		service: ev.source.db,
		collection: ev.source.collection,
		counter,
		ts_ms: ev.ts_ms,
		clients: rec.clients ?? [],
	};
	return broker.call("special.stats.increment", params);
}

export default workerService(
	{
		name: "observer",
		port: WORKER_PORTS.observer,
		async onChange(this: any, rec: OutboxRecord) {
			await observe(this.broker, rec);
		},
	},
	{
		methods: {
			/** The handler the stream calls, for tests and replays: `observe` on this node's broker. */
			handleChange(this: any, rec: OutboxRecord) {
				return observe(this.broker, rec);
			},
		},
	},
);
