/**
 * Answers given before the request's body has been read to its end: an upload's 413 (a file over the limit, a
 * declared length too large), a 401 or 415 before a body is parsed, a JSON body over its limit. Closing the
 * connection at once, as a response with `Connection: close` does, resets it under a client that is still sending: it
 * sees EPIPE or ECONNRESET, often without the answer. So the answer is written at once, with `Connection: close`, and
 * the connection is closed only once the rest of the body has been read and dropped; a client that sends more than
 * DISCARD_BYTES after it, takes longer than DISCARD_MS in all or pauses DISCARD_IDLE_MS is cut off (a body is never
 * read for ever).
 *
 * A body the gateway's parser reads (JSON, and the token route's form) is bounded before the parser: a declared length
 * over the limit is answered at once, and a chunked body as soon as it passes the limit (the parser itself would read
 * every byte that follows before answering).
 */
import type { IncomingMessage, ServerResponse } from "http";
import { ApiError, bodyTooLarge } from "../../lib/errors";
import { carriesBody, FORM_TYPE, JSON_TYPE } from "../../lib/body-media";

/** What is read and dropped of a body after an early answer, at most: bytes, time in all, time without a byte. */
export const DISCARD_BYTES = 16 * 1024 * 1024;
export const DISCARD_MS = 30_000;
export const DISCARD_IDLE_MS = 5_000;

/** The body limits of the gateway's parsers (moleculer-web's body-parser options take bytes). */
export const JSON_BODY_LIMIT = 1024 * 1024;
export const FORM_BODY_LIMIT = 64 * 1024;

/** Responses written early whose end waits for the request's body (see endAnswer). */
const early = new WeakSet<ServerResponse>();

/** Whether `res` was answered before its request's body ended, and is closed once the body is dropped. */
export const answeredEarly = (res: ServerResponse): boolean => early.has(res);

/**
 * Ends `res` with `chunk` (its head written by the caller, with its Content-Length): at once when the request's body
 * has been read to its end (or it has none), else once the rest of the body is read and dropped (see the file's
 * comment). A second end of the same response changes nothing.
 */
export function endAnswer(res: ServerResponse, chunk?: string | Buffer): void {
	const req = res.req as IncomingMessage | undefined;
	if (early.has(res)) return;
	if (!req || req.complete || !carriesBody(req) || res.writableEnded || req.destroyed) return void res.end(chunk);
	early.add(res);
	if (!res.headersSent) res.setHeader("Connection", "close");
	if (chunk !== undefined) res.write(chunk);
	let seen = 0;
	const finish = (cut: boolean) => {
		clearTimeout(all);
		clearTimeout(idle);
		req.off("data", dropped);
		req.off("end", ended);
		res.off("close", gone);
		res.end();
		if (cut) req.socket?.destroy();
	};
	const dropped = (c: Buffer) => {
		seen += c.length;
		if (seen > DISCARD_BYTES) finish(true);
		else idle.refresh();
	};
	const ended = () => finish(false);
	const gone = () => finish(true);
	const all = setTimeout(() => finish(true), DISCARD_MS).unref();
	const idle = setTimeout(() => finish(true), DISCARD_IDLE_MS).unref();
	req.on("data", dropped);
	req.once("end", ended);
	res.once("close", gone);
	req.resume();
}

/** The limit of the parser that reads this request's body (undefined: none does). */
function parsedLimit(req: IncomingMessage, formRoute: boolean): { bytes: number; message: string } | undefined {
	const type = String(req.headers["content-type"] ?? "").trim();
	if (JSON_TYPE.test(type)) return { bytes: JSON_BODY_LIMIT, message: bodyTooLarge(JSON_BODY_LIMIT) };
	if (formRoute && FORM_TYPE.test(type)) return { bytes: FORM_BODY_LIMIT, message: bodyTooLarge(FORM_BODY_LIMIT) };
	return undefined;
}

/**
 * For a body the gateway's parser reads: a 413 now when its declared length is over the parser's limit, else `over`
 * is called with the 413 once the bytes received pass it (counted as the HTTP parser hands them over, which neither
 * reads nor starts the body). Returns the 413 to answer at once, if any.
 */
export function boundParsedBody(req: IncomingMessage, formRoute: boolean, over: (err: ApiError) => void): ApiError | undefined {
	const limit = carriesBody(req) ? parsedLimit(req, formRoute) : undefined;
	if (!limit) return undefined;
	const declared = Number(req.headers["content-length"]);
	if (Number.isFinite(declared) && declared > limit.bytes) return new ApiError(413, limit.message);
	let seen = 0;
	const push = req.push;
	req.push = function (chunk: unknown, encoding?: BufferEncoding) {
		if (chunk && typeof (chunk as Buffer).length === "number" && seen <= limit.bytes) {
			seen += (chunk as Buffer).length;
			if (seen > limit.bytes) over(new ApiError(413, limit.message));
		}
		return push.call(this, chunk, encoding);
	};
	return undefined;
}
