/**
 * A live stream's catch-up (services/api/live-cursor.ts): the changes between its position (a resume's, or the
 * outbox's head before its listing) and the feed's, decided as one span per round, before it joins the feed.
 */
import { performance } from "perf_hooks";
import type { ServiceBroker } from "moleculer";
import { admitsNow, decideSpan, imageOf } from "../../authority/delivery";
import { grantCache } from "../../authority/grant-cache";
import type { Outbox, OutboxRecord } from "../../events/outbox";
import { ApiError } from "../../lib/errors";
import { recordKeys } from "./live-keys";
import type { LiveRing } from "./live-ring";
import type { Sub } from "./live-stream";

/** Records per read of the outbox (the feed's and a catch-up's). */
export const READ_BATCH = 500;
/** The longest a resume waits for this gateway's feed to read the writes answered before it (see reach). */
const LIVE_REACH_MS = 5000;
/**
 * The longest the feed decides records in one go before it lets the event loop turn (sockets flush, requests and
 * other streams are served): a burst of commits read as one batch of hundreds of records, each written to many
 * streams, would otherwise hold the loop for hundreds of milliseconds (docs/benchmarks.md, "Live cursors").
 */
export const LIVE_SLICE_MS = 8;
/**
 * The most documents one catch-up holds (each document's last change, until the span is read): a stream further
 * behind answers 410, and a fresh listing costs less than replaying that much.
 */
export const MAX_CATCH_UP_DOCS = 10_000;

/** What a catch-up reads and calls of the gateway's live cursors (LiveCursors). */
export interface CatchUpHub {
	broker: ServiceBroker;
	outbox: Outbox;
	/** The feed's newest records and its position. */
	ring: LiveRing;
	stopped(): boolean;
	/** The feed reads now (one in flight reads once more), and the hub wakes. */
	wake(): void;
	write(sub: Sub, text: string): void;
	end(sub: Sub, err: unknown): void;
	/** Puts a caught-up stream in the feed's index. */
	join(sub: Sub): void;
}

/**
 * Feeds a stream the changes between its position and the hub's, then puts it in the index (from then on the
 * feed decides each record for it as it arrives).
 *
 * Those changes are taken as one span per round, not replayed: the records of the stream's collection whose
 * document the view admits in some image of the span, coalesced per document, then one frame per document in the
 * order of its last change, deciding its last image (decideSpan): in view, the document as it is at the span's end;
 * out of view or gone, a `leave` without data. A state since redacted, or a document since destroyed, is never
 * sent; a document the view never admitted in the span is never named. Records of other collections are never
 * looked at (their documents are no business of this view).
 *
 * Each frame's position is (the span's start, the document's last change): a client cut off in the middle resumes
 * with the same span, less the documents whose last change it already had. Changes that arrive meanwhile make
 * the next, short, round.
 */
export async function catchUp(hub: CatchUpHub, sub: Sub): Promise<void> {
	try {
		if (sub.target !== undefined) await reach(hub, sub.target);
		while (!sub.closed) {
			const end = hub.ring.position;
			if (sub.pos >= end) return hub.join(sub);
			await span(hub, sub, end);
		}
	} catch (err) {
		hub.end(sub, err);
	}
}

/**
 * Waits (at most LIVE_REACH_MS) until the feed has read the outbox up to `seq`: a resume's first span must end at or
 * after every write answered before it, or it would send a document in a state its next change already replaced.
 */
async function reach(hub: CatchUpHub, seq: number): Promise<void> {
	if (hub.ring.position >= seq) return;
	// The feed reads now (one in flight reads once more); its `readable` wakes the hub. One wake of the hub too: a
	// read of its own in flight is followed by another at once (`signalled`).
	hub.wake();
	const deadline = performance.now() + LIVE_REACH_MS;
	while (hub.ring.position < seq && !hub.stopped() && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
}

/** One round of catchUp: the span from the stream's position to `end`. */
async function span(hub: CatchUpHub, sub: Sub, end: number): Promise<void> {
	const base = sub.pos;
	const sent = sub.sent ?? base;
	sub.sent = undefined;
	/** By document: whether the view admitted it at the span's start, and its last record of the span. */
	const docs = new Map<string, { was: boolean; last: OutboxRecord }>();
	let at = base;
	while (at < end && !sub.closed) {
		const recs = at >= hub.ring.floor ? hub.ring.after(at, READ_BATCH) : await hub.outbox.readFed(at, READ_BATCH);
		// Nothing after `at` up to `end` (a store that lost them): read as caught up, as the feed would.
		if (!recs.length) at = end;
		const index = await grantCache.get(hub.broker);
		for (const rec of recs) {
			if (rec.seq > end || sub.closed) break;
			at = rec.seq;
			if (rec.event.topic !== sub.topic || !concerns(sub, rec)) continue;
			const held = docs.get(rec.event.id);
			if (held) held.last = rec;
			else {
				const was = admitsNow(sub, index, imageOf(rec.event.before));
				if (was || admitsNow(sub, index, imageOf(rec.event.after))) docs.set(rec.event.id, { was, last: rec });
			}
		}
		if (recs.length && recs[recs.length - 1].seq > end) at = end;
		if (docs.size > MAX_CATCH_UP_DOCS)
			throw new ApiError(
				410,
				`this stream is too far behind its position: more than ${MAX_CATCH_UP_DOCS} documents of its view changed since; reconnect without Last-Event-ID to start over`,
			);
	}
	const order = [...docs].filter(([, d]) => d.last.seq > sent).sort(([, a], [, b]) => a.last.seq - b.last.seq);
	let index = await grantCache.get(hub.broker);
	let sliceStart = performance.now();
	for (const [id, d] of order) {
		if (sub.closed) return;
		const frame = decideSpan(sub, index, id, d.was, imageOf(d.last.event.after));
		if (frame) hub.write(sub, `id: ${sub.positions.seal(base, d.last.seq)}\nevent: change\ndata: ${JSON.stringify(frame)}\n\n`);
		if (performance.now() - sliceStart >= LIVE_SLICE_MS) {
			await new Promise<void>((resolve) => setImmediate(resolve));
			index = await grantCache.get(hub.broker);
			sliceStart = performance.now();
		}
	}
	sub.pos = at;
}

/** Whether a record's document can be in the stream's view: it has a zone key of the stream (as the feed's index). */
function concerns(sub: Sub, rec: OutboxRecord): boolean {
	const keys = recordKeys(rec);
	return sub.keys.some((k) => keys.has(k));
}
