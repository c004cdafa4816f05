/**
 * A LISTEN on one PostgreSQL channel, on a connection of its own held from the pool until closed: the change feed
 * (events/feed.ts, the outbox's channel) and the document cache (stores/doc-cache.ts, the documents' channel).
 *
 * A connection that fails ends the listening once (`onLost`); one that went silent delivers no notification and is
 * found by `check`, whose statement answers within LISTEN_ANSWER_MS or the connection is destroyed. Either way the
 * notifications sent meanwhile are lost: a listener treats `onLost` as "everything may have changed".
 */
import type { Relational } from "../runtime/relational";

/** The listener's statements (LISTEN, its health checks) answer within this, else its connection is given up. */
export const LISTEN_ANSWER_MS = 2000;

export interface Listening {
	/** Resolves true while the connection answers within its time. */
	check(): Promise<boolean>;
	close(): void;
}

/** `onNotify` with each notification's payload, in the order PostgreSQL delivers them (commit order). */
export async function listenOn(rel: Relational, channel: string, onNotify: (payload: string) => void, onLost: () => void): Promise<Listening> {
	const c = await rel.client(LISTEN_ANSWER_MS);
	let closed = false;
	const close = (err?: Error) => {
		if (closed) return;
		closed = true;
		c.off("notification", notified);
		c.off("error", failed);
		c.off("end", failed);
		c.release(err ?? true);
	};
	const notified = (m: { channel: string; payload?: string }) => m.channel === channel && onNotify(m.payload ?? "");
	const failed = () => {
		if (closed) return;
		close(new Error(`the listener's connection on ${channel} ended`));
		onLost();
	};
	c.on("notification", notified);
	c.on("error", failed);
	c.on("end", failed);
	try {
		await c.query(`listen ${channel}`);
	} catch (err) {
		close(err as Error);
		throw err;
	}
	return {
		// Each statement of this checkout is bound to LISTEN_ANSWER_MS (rel.client): past it the connection is destroyed.
		check: async () =>
			!closed &&
			!!(await c.query("select 1").then(
				() => true,
				() => false,
			)),
		close: () => close(),
	};
}
