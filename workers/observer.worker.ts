/**
 * observer (4020): counts every create, update, delete and restore per service and collection into special/stats,
 * in daily, monthly and yearly UTC buckets, per tenant (see lib/stat-buckets.ts and services/special/stats.ts). It
 * reads the change stream as consumer group `observer` in batches, at least once: a batch's increments are summed
 * per bucket (one write per bucket, not three per event), and the special service remembers the positions it counted
 * per bucket, so a redelivered event never counts twice.
 */
import { STATS_INCREMENT_MANY_ACTION, type StatsApplied, type StatsIncrement } from "../lib/contracts";
import type { Service, ServiceBroker } from "moleculer";
import type { OutboxRecord } from "../events/outbox";
import { WORKER_PORTS } from "./index";
import { workerService } from "./worker";
import { counterOf, SEQ_WINDOW, STATS_TOPIC } from "../lib/stat-buckets";

/**
 * A redelivery replays at most two batches (the one in progress, and at most one batch's worth handled since the
 * group's position was last stored: events/stream.ts): the buckets' memory of counted positions (SEQ_WINDOW) covers two.
 */
export const OBSERVER_BATCH = Math.floor(SEQ_WINDOW / 2);

/** The increment a change record makes, or null (not counted). */
function incrementOf(rec: OutboxRecord): StatsIncrement | null {
	const ev = rec.event;
	// Writes to the statistics themselves are never counted: no feedback loop even if something records them.
	if (!ev || ev.topic === STATS_TOPIC) return null;
	const counter = counterOf(ev);
	if (!counter) return null;
	return { seq: rec.seq, service: ev.source.db, collection: ev.source.collection, counter, ts_ms: ev.ts_ms, clients: rec.clients ?? [] };
}

/** Handles change records; throws (the stream retries the batch) when special/stats cannot be written. */
export async function observe(broker: ServiceBroker, recs: OutboxRecord[]): Promise<StatsApplied | null> {
	const increments = recs.map(incrementOf).filter((x): x is StatsIncrement => x !== null);
	if (!increments.length) return null;
	return broker.call(STATS_INCREMENT_MANY_ACTION, { increments });
}

export default workerService(
	{
		name: "observer",
		port: WORKER_PORTS.observer,
		maxBatch: OBSERVER_BATCH,
		async onChanges(this: Service, recs: OutboxRecord[]) {
			await observe(this.broker, recs);
		},
	},
	{
		methods: {
			/** The handler the stream calls, for tests and replays: `observe` on this node's broker. */
			handleChange(this: Service, rec: OutboxRecord) {
				return observe(this.broker, [rec]);
			},
			handleChanges(this: Service, recs: OutboxRecord[]) {
				return observe(this.broker, recs);
			},
		},
	},
);
