/**
 * The stores' shared helpers. The store's interface itself (documents, filters, `DocumentStore`, TENANT_REF) is the
 * catalog's (catalog/store.ts), re-exported here so the stores keep one place to import from.
 */
import { TENANT_REF, type DocumentStore, type FindOptions, type Page } from "../catalog/store";

export * from "../catalog/store";

/** A page and its total through the store's one-pass `findPage` when it has one. */
export async function pageOf(store: DocumentStore, o: FindOptions): Promise<Page> {
	if (store.findPage) return store.findPage(o);
	const [docs, total] = await Promise.all([store.find(o), store.count(o.query, o)]);
	return { docs, total };
}

/**
 * Longest stretch of synchronous work (ms) a store's read does before it lets the event loop run: one request over
 * any number of documents must not delay `/status` (or anyone's login) by more than 100 ms.
 */
export const SLICE_MS = 10;

/**
 * When the event loop last turned, about: an immediate set on first use resets it, so a chain of promise callbacks
 * that never lets the loop turn (a cursor whose pages come from memory, page after page) is measured as one stretch.
 */
let turnStart = performance.now();
let watching = false;
function sinceTurn(): number {
	if (!watching) {
		watching = true;
		setImmediate(() => {
			watching = false;
			turnStart = performance.now();
		});
	}
	return performance.now() - turnStart;
}

/**
 * Time slices of long work: check `due` every few dozen iterations of a loop (and once per read), then `await next()`,
 * which lets the event loop turn (I/O: /status, other requests) before going on.
 */
export class Slices {
	get due(): boolean {
		return sinceTurn() >= SLICE_MS;
	}
	async next(): Promise<void> {
		await new Promise<void>((r) => setImmediate(r));
		turnStart = performance.now();
	}
}

/** Lets the event loop turn when the current stretch of synchronous work has used its slice (see Slices). */
export async function yieldIfDue(): Promise<void> {
	const slices = new Slices();
	if (slices.due) await slices.next();
}

/**
 * A stable merge sort that yields between slices (`Array.prototype.sort` of 100 000 documents by a JavaScript
 * comparator holds the process for hundreds of milliseconds): runs of RUN sorted natively, then merged bottom-up.
 */
export async function sortInSlices<T>(items: T[], cmp: (a: T, b: T) => number, slices = new Slices()): Promise<T[]> {
	const RUN = 256;
	let src = items;
	for (let i = 0; i < src.length; i += RUN) {
		const run = src.slice(i, i + RUN).sort(cmp);
		for (let j = 0; j < run.length; j++) src[i + j] = run[j];
		if (slices.due) await slices.next();
	}
	let dst = new Array<T>(src.length);
	for (let width = RUN; width < src.length; width *= 2) {
		for (let lo = 0; lo < src.length; lo += 2 * width) {
			const mid = Math.min(lo + width, src.length);
			const hi = Math.min(lo + 2 * width, src.length);
			let i = lo;
			let j = mid;
			let k = lo;
			while (i < mid && j < hi) {
				// The left element first on ties: stable.
				dst[k++] = cmp(src[j], src[i]) < 0 ? src[j++] : src[i++];
				if ((k & 1023) === 0 && slices.due) await slices.next();
			}
			while (i < mid) dst[k++] = src[i++];
			while (j < hi) dst[k++] = src[j++];
		}
		[src, dst] = [dst, src];
	}
	return src;
}

export { elementTests } from "../lib/query";

const UNSET_WHEN_NULL = ["ref", TENANT_REF];

/**
 * The store update for a `$set`. A `ref` (or its derived `tenant_ref`, see TENANT_REF) set to null is removed instead:
 * the unique index on `tenant_ref` holds only rows that have the key, so a stored null would let only one
 * document clear its reference.
 */
export function updateOf(set: Record<string, unknown>): Record<string, unknown> {
	const cleared = UNSET_WHEN_NULL.filter((k) => k in set && set[k] === null);
	if (!cleared.length) return { $set: set };
	const rest: Record<string, unknown> = { ...set };
	for (const k of cleared) delete rest[k];
	return { ...(Object.keys(rest).length ? { $set: rest } : {}), $unset: Object.fromEntries(cleared.map((k) => [k, true])) };
}
