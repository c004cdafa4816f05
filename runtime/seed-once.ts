/**
 * A one-time job across every node sharing a document store (the first-start seed): a claim document with a fixed
 * id, inserted first. The store's unique `id` decides who inserted it, with
 * or without Redis (a cache lease would not do: the embedded cache is per process). The holder keeps the claim
 * alive with a heartbeat; a claim whose heartbeat stopped (its node died mid-job) is taken over, so a crash never
 * leaves the job undone for good. Once done, the claim records who did it and stays.
 */
import { isDuplicateKeyError, type DocumentStore, type StoredDoc } from "../catalog/store";

export interface OnceOptions {
	/** Who is claiming (recorded: the node that did the job). */
	holder: string;
	/** Heartbeat period of the holder. */
	beatMs?: number;
	/** A claim not renewed for this long is taken over. */
	staleMs?: number;
	/** How long a node waits for another's claim to finish before giving up (its start fails). */
	waitMs?: number;
}

export type OnceResult = { ran: true } | { ran: false; by: string };

export interface Holding {
	/** The claim of a holder that died mid-job, when this run took it over (with what that holder noted). */
	previous?: StoredDoc;
	/** Records fields on the claim (what the job is about to write, for a takeover to find). */
	note(fields: Record<string, unknown>): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs `job` on exactly one of the nodes calling this with the same store and `id`. `done` is asked under the
 * claim first: a job done before claims existed (an earlier version) is recorded as done without running again.
 */
export async function runOnce(store: DocumentStore, id: string, o: OnceOptions, done: () => Promise<boolean>, job: (h: Holding) => Promise<void>): Promise<OnceResult> {
	const beatMs = o.beatMs ?? 2000;
	const staleMs = o.staleMs ?? 15_000;
	const until = Date.now() + (o.waitMs ?? 300_000);
	for (;;) {
		const c = await store.findOne({ id });
		if (c?.state === "done") return { ran: false, by: String(c.by) };
		if (!c) {
			const mine: StoredDoc = { id, state: "running", holder: o.holder, beat: Date.now() };
			const won = await store.insert(mine).then(
				() => true,
				(err) => {
					if (isDuplicateKeyError(err)) return false;
					throw err;
				},
			);
			if (won) return hold(store, id, o.holder, beatMs, done, job);
		} else if ((c.beat as number) < Date.now() - staleMs) {
			// Matching the old heartbeat too: of two nodes taking over the same dead claim, one succeeds.
			const took = await store.updateIf({ id, state: "running", holder: c.holder, beat: c.beat }, { $set: { holder: o.holder, beat: Date.now() } });
			if (took) return hold(store, id, o.holder, beatMs, done, job, c);
		}
		if (Date.now() >= until) throw new Error(`${id}: still claimed by ${String(c?.holder)} after waiting; restart this node once that one is up`);
		await sleep(100 + Math.floor(Math.random() * 150));
	}
}

async function hold(
	store: DocumentStore,
	id: string,
	holder: string,
	beatMs: number,
	done: () => Promise<boolean>,
	job: (h: Holding) => Promise<void>,
	previous?: StoredDoc,
): Promise<OnceResult> {
	const mine = { id, holder };
	const timer = setInterval(() => void store.updateIf(mine, { $set: { beat: Date.now() } }).catch(() => undefined), beatMs);
	try {
		const earlier = await done();
		const note = async (fields: Record<string, unknown>) => void (await store.updateIf(mine, { $set: fields }));
		if (!earlier) await job({ previous, note });
		const by = earlier ? "an earlier start" : holder;
		await store.updateIf(mine, { $set: { state: "done", by, beat: Date.now(), at: new Date().toISOString() } });
		return earlier ? { ran: false, by } : { ran: true };
	} catch (err) {
		// Frees the claim at once so another node (or this one's restart) runs the job, instead of waiting out staleMs.
		await store.removeMany({ id, holder, state: "running" }).catch(() => undefined);
		throw err;
	} finally {
		clearInterval(timer);
	}
}
