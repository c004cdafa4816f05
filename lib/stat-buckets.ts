/**
 * The observer's statistics model (special/stats): one document per tenant (client id), service, collection,
 * period and bucket, holding the counts of created, updated, deleted and restored documents. Buckets are UTC
 * calendar periods of the change event's time: `2026-11-21` (daily), `2026-11` (monthly), `2026` (yearly).
 */
import { createHash } from "crypto";
import type { ChangeEvent } from "./change-event";

export const PERIODS = ["daily", "monthly", "yearly"] as const;
export type Period = (typeof PERIODS)[number];
export type Counter = "created" | "updated" | "deleted" | "restored";
export const COUNTERS: readonly Counter[] = ["created", "updated", "deleted", "restored"];

/** The collection whose writes are never counted (its own documents: counting them would feed back). */
export const STATS_TOPIC = "special.stats";

/** How many counted stream positions a bucket remembers: a redelivered event among them is not counted twice. */
export const SEQ_WINDOW = 200;

export function bucketOf(period: Period, tsMs: number): string {
	const iso = new Date(tsMs).toISOString();
	return period === "daily" ? iso.slice(0, 10) : period === "monthly" ? iso.slice(0, 7) : iso.slice(0, 4);
}

/** Deterministic 24-hex id: nodes that create the same bucket at the same time collide on it instead of doubling it. */
export function statId(client: string, service: string, collection: string, period: Period, bucket: string): string {
	return createHash("sha256").update(`stats\u0000${client}\u0000${service}\u0000${collection}\u0000${period}\u0000${bucket}`).digest("hex").slice(0, 24);
}

/**
 * Which counter a change event moves, or null. `d` counts a document leaving the live state: a destroy or a
 * retention purge of a document that was already soft-deleted (its `before.deleted_at` is set) is not a second
 * deletion. Unknown ops are ignored.
 */
export function counterOf(ev: Pick<ChangeEvent, "op" | "before">): Counter | null {
	switch (ev.op) {
		case "c":
			return "created";
		case "u":
			return "updated";
		case "r":
			return "restored";
		case "d":
			return ev.before && ev.before.deleted_at ? null : "deleted";
		default:
			return null;
	}
}
