/**
 * `/cursor` routes: a collection's matches as server-sent events, page by page through the collection's `cursor`
 * action, resumed after Last-Event-ID, then (with `?live=true`) its changes (services/api/live-cursor.ts).
 */
import type { ServerResponse } from "http";
import { ApiError, toErrorBody } from "../../lib/errors";
import { principalOf } from "../../lib/types";
import { observeHttp } from "../../runtime/metrics";
import { emitAudit } from "../../events/audit-shipper";
import { lastEventIdOf } from "./live-cursor";
import type { Gateway, Req, Res } from "./gateway";

/** The documents one call of the `cursor` action reads. */
const CURSOR_PAGE = 100;
/** docs/contracts.md "Limits the platform keeps": open `/cursor` streams per principal on one gateway. */
export const MAX_OPEN_CURSORS = 8;

/**
 * Resolves on the next `drain` or `close`, then removes both listeners (a race of two `events.once` would leave
 * the loser attached on every wait: listeners pile up on a long stream).
 */
function drainOrClose(res: ServerResponse): Promise<void> {
	return new Promise((resolve) => {
		const done = () => {
			res.off("drain", done);
			res.off("close", done);
			resolve();
		};
		res.on("drain", done);
		res.on("close", done);
	});
}

/** The cursor's method (mixed into the gateway's `methods`). */
export const cursorStreamMethods = {
	/**
	 * The cursor is produced here, page by page, through the collection's `cursor` action (so every page passes
	 * the authority layer). The first page is read before any header leaves, so a bad query is a plain JSON
	 * error; later failures become an `event: error` frame. A client that goes away stops the loop.
	 */
	async streamCursor(this: Gateway, req: Req, res: Res, action: string) {
		const ctx = req.$ctx;
		// At most MAX_OPEN_CURSORS open streams per principal (429 before any SSE header); the slot is freed when the
		// response closes, whichever way (end, client gone, idle timeout).
		const who = principalOf(ctx.meta.token) ?? `ip:${ctx.meta.ip}`;
		const openCursors = this.openCursors as Map<string, number>;
		const open = openCursors.get(who) ?? 0;
		if (open >= MAX_OPEN_CURSORS) throw new ApiError(429, "too many open cursors");
		openCursors.set(who, open + 1);
		let released = false;
		res.once("close", () => {
			if (released) return;
			released = true;
			const n = (openCursors.get(who) ?? 1) - 1;
			if (n > 0) openCursors.set(who, n);
			else openCursors.delete(who);
		});
		// A client that reads nothing: the socket buffer stays full, no 'drain' comes; after CURSOR_IDLE_MS the
		// stream is destroyed (its buffers go with it). The next item is never produced while the buffer is full.
		const idleMs: number = this.cfg.cursorIdleMs;
		const drained = async () => {
			const timer = setTimeout(() => res.destroy(), idleMs);
			try {
				await drainOrClose(res);
			} finally {
				clearTimeout(timer);
			}
		};
		const finish = (text: string) => {
			res.end(text);
			if (res.writableFinished) return;
			const timer = setTimeout(() => res.destroy(), idleMs);
			res.once("close", () => clearTimeout(timer));
		};
		const params = req.$params ?? {};
		const pagination = params.query?.pagination;
		let remaining = Infinity;
		if (pagination !== undefined) {
			try {
				const p = typeof pagination === "string" ? JSON.parse(pagination) : pagination;
				remaining = Number.isInteger(p?.limit) ? p.limit : 10;
			} catch {
				remaining = 10; // the action answers the 400 itself
			}
		}
		// A reconnecting EventSource sends the id of the last event it got: the stream resumes after that document
		// (the ones before it, in the same order, are not sent again).
		const lastEventId = lastEventIdOf(req.headers, params.query);
		let resumeAfter: string | undefined;
		// `?live=true`: validated now (a plain JSON error), attached after the matches; a position resumes without them.
		const live = await this.liveCursors.prepare(req, action, params);
		const sse = () => {
			res.writeHead(200, { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", Connection: "keep-alive", "X-Accel-Buffering": "no" });
			observeHttp(this.broker, req, 200);
			emitAudit(this.broker, req, 200);
		};
		if (live?.resumes) {
			sse();
			return live.attach(res);
		}
		if (lastEventId !== undefined && String(lastEventId).trim() !== "") {
			resumeAfter = String(lastEventId).trim();
			if (!/^[0-9a-f]{24}$/i.test(resumeAfter)) throw new ApiError(400, "Last-Event-ID must be the id of a document of this cursor (24 hex digits)");
		}
		let closed = false;
		res.on("close", () => (closed = true));
		let offset = 0;
		const next = () => ctx.call(action, { ...params, page: { offset, size: Math.min(CURSOR_PAGE, remaining) } }) as Promise<{ items: Array<{ id: string }> }>;
		let page = await next();
		sse();
		try {
			for (;;) {
				for (const doc of page.items) {
					if (closed) return;
					if (resumeAfter !== undefined) {
						if (doc.id === resumeAfter) resumeAfter = undefined;
						continue;
					}
					if (!res.write(`id: ${doc.id}\ndata: ${JSON.stringify(doc)}\n\n`)) await drained();
				}
				offset += page.items.length;
				remaining -= page.items.length;
				if (closed || page.items.length < CURSOR_PAGE || remaining <= 0) break;
				page = await next();
			}
			if (!closed && resumeAfter !== undefined)
				finish(
					`event: error\ndata: ${JSON.stringify(toErrorBody(new ApiError(404, `Last-Event-ID ${resumeAfter} is not among this cursor's documents; reconnect without it to start over`)))}\n\n`,
				);
			else if (!closed && live) live.attach(res);
			else if (!closed) finish("event: end\ndata: close\n\n");
		} catch (err) {
			if (!closed) finish(`event: error\ndata: ${JSON.stringify(toErrorBody(err))}\n\n`);
		}
	},
};
