/** Change records made up for stream tests, and small helpers to publish and compare them. */
import { embeddedStream } from "../../events/stream";
import { waitForValue } from "./wait";
import { randomBytes } from "crypto";
import type { OutboxRecord } from "../../events/outbox";

let seqBase = Date.now() * 1000;

/** A record with a fresh, increasing position (the content.notes create of a random id). */
export function testRecord(topic = "content.notes"): OutboxRecord {
	const id = randomBytes(12).toString("hex");
	return {
		seq: ++seqBase,
		event: { id, ts_ms: Date.now(), op: "c", topic, source: { name: "platform", db: "content", collection: "notes" }, after: { id } as any },
		clients: ["c1"],
		actor: { uid: "u1" },
	};
}

/** Publishes `count` fresh records in order; returns their positions. */
export async function publishRecords(stream: { publish(rec: OutboxRecord): Promise<unknown> }, count: number): Promise<number[]> {
	const out: number[] = [];
	for (let i = 0; i < count; i++) {
		const rec = testRecord();
		await stream.publish(rec);
		out.push(rec.seq);
	}
	return out;
}

export const settle = (ms = 500) => new Promise((r) => setTimeout(r, ms));
export const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);

/** Waits until every worker group of an embedded platform has handled every change event written so far. */
export async function drained(cfg: Parameters<typeof embeddedStream>[0], ms = 15_000): Promise<void> {
	await waitForValue("the workers to catch up with the change stream", () => embeddedStream(cfg).drained(), ms);
}
