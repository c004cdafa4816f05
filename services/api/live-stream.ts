/**
 * One live stream (services/api/live-cursor.ts): the request's `live` and Last-Event-ID, the stream's state (Sub),
 * the limits every stream lives by, and the frame a stopping gateway ends it with.
 */
import type { IncomingMessage, ServerResponse } from "http";
import type { Watcher, imageOf } from "../../authority/delivery";
import { ApiError } from "../../lib/errors";
import type { StreamPositions } from "./live-position";

/** How often each stream's token is checked again (revocation, logout, deactivation, expiry: 401 within 2 s). */
export const LIVE_SWEEP_MS = 1000;
/** A comment line at least this often (docs/contracts.md "Realtime: live cursors and MQTT in the browser": at least every 15 s). */
export const KEEP_ALIVE_MS = 14_000;
/** A client that reads less than its changes: past this much unsent data its stream is cut (it resumes by position). */
export const MAX_BUFFERED = 4 * 1024 * 1024;
/**
 * What a stopping gateway's streams end with: `retry:` sets the delay after which `EventSource` connects again (with
 * its `Last-Event-ID`, to another gateway behind the proxy, or to this one restarted); a comment says why. No
 * `event: error`: a client that closes its source on an error frame with data (docs/api.md) must not stop here.
 */
export const LIVE_RECONNECT_MS = 1000;
export const CLOSING_FRAME = `: this gateway is stopping; reconnect\nretry: ${LIVE_RECONNECT_MS}\n\n`;

/**
 * Ends a stream with CLOSING_FRAME, then its connection once the frame is out: the stream's `Connection: keep-alive`
 * would otherwise keep the socket open after the response, and the stopping server waits for every socket.
 */
export function closeStream(res: ServerResponse): void {
	if (res.destroyed || res.writableEnded) return;
	const socket = res.socket;
	res.end(CLOSING_FRAME, () => socket?.end());
}

/** A `Last-Event-ID` that is a document id resumes the listing (streamCursor); anything else must be a position. */
export const DOCUMENT_ID = /^[0-9a-f]{24}$/i;
export const notAPosition = () => new ApiError(400, "Last-Event-ID is not a position of this stream; reconnect without it to start over");
export const expired = () => new ApiError(410, "Last-Event-ID is older than this stream's retention; reconnect without it to start over");

/**
 * A cursor request's Last-Event-ID: the header, else `?lastEventId=`, which EventSource polyfills add on a reconnect
 * (a browser's own EventSource sends the header only).
 */
export function lastEventIdOf(headers: IncomingMessage["headers"], query: Record<string, unknown> | undefined): unknown {
	return headers["last-event-id"] ?? query?.lastEventId;
}

/** `live` query parameter: absent or `false` → no, `true` → yes, anything else 400. */
export function liveRequested(query: Record<string, unknown> | undefined): boolean {
	const v = query?.live;
	if (v === undefined || v === "false" || v === false) return false;
	if (v === "true" || v === true) return true;
	throw new ApiError(400, "live must be true or false");
}

export interface ReqLike {
	headers: IncomingMessage["headers"];
	query?: Record<string, unknown>;
	socket?: { remoteAddress?: string };
}

/** A document image of a change, in stored form (`id`), as the delivery decision takes it. */
export type Image = NonNullable<ReturnType<typeof imageOf>>;

/** A live stream: the watcher the delivery decision takes, and where its frames go. */
export interface Sub extends Watcher {
	res: ServerResponse;
	req: ReqLike;
	topic: string;
	keys: string[];
	/** Its positions, sealed for it alone (./live-position.ts). */
	positions: StreamPositions;
	/** The last position decided for this stream. */
	pos: number;
	/** Resuming in the middle of a catch-up: the documents whose last change is at or before this were sent. */
	sent?: number;
	/** A resume: the store's head when it was asked for; its catch-up reaches at least this far (see catchUp). */
	target?: number;
	/** Caught up with the hub: in the index, fed as records arrive. */
	live: boolean;
	closed: boolean;
	/** The record being decided (a subscriber under several keys of one change is decided once). */
	mark: number;
	/** Its response is corked: the frames written in this turn of the loop go out in one write. */
	corked?: boolean;
}

/** What streamCursor gets back from `prepare`: where the changes start, and whether the listing is skipped. */
export interface LiveStart {
	/** Resuming from a position: no listing, the changes after it. */
	resumes: boolean;
	/** Writes `event: live` and feeds the stream's changes from then on (the response stays open). */
	attach(res: ServerResponse): void;
}
