/**
 * The one error type of the platform. Every failure that reaches a client is an ApiError,
 * mapped once (in the gateway) to the spec's body `{ statusCode, message, error }`.
 */
import { Errors } from "moleculer";

export const STATUS_NAMES: Record<number, string> = {
	400: "Bad Request",
	401: "Unauthorized",
	403: "Forbidden",
	404: "Not Found",
	405: "Method Not Allowed",
	409: "Conflict",
	410: "Gone",
	412: "Precondition Failed",
	413: "Payload Too Large",
	415: "Unsupported Media Type",
	416: "Range Not Satisfiable",
	422: "Unprocessable Entity",
	429: "Too Many Requests",
	500: "Internal Server Error",
	502: "Bad Gateway",
	503: "Service Unavailable",
	504: "Gateway Timeout",
};

export interface ErrorBody {
	statusCode: number;
	message: string;
	error: string;
}

/** A MoleculerError so it crosses the transporter with its code intact. */
export class ApiError extends Errors.MoleculerError {
	constructor(statusCode: number, message: string) {
		super(message, statusCode, STATUS_NAMES[statusCode] ?? "Error");
		this.name = "ApiError";
	}
}

export const badRequest = (message: string) => new ApiError(400, message);
export const unauthorized = (message = "authorization token is required") => new ApiError(401, message);
export const forbidden = (message = "access denied") => new ApiError(403, message);
/**
 * A refused bearer (401). A missing, malformed or expired token answers the interface's one message, which clients
 * match; what was wrong goes in `WWW-Authenticate` (RFC 6750 §3): `Bearer` alone for a missing token, else
 * `error="invalid_token"` with `description` (plain words, no quote). The gateway sends the header (wwwAuthenticateOf).
 */
export function bearerRefused(description?: string, message = "authorization token is required"): ApiError {
	const err = new ApiError(401, message);
	err.data = { wwwAuthenticate: description ? `Bearer error="invalid_token", error_description="${description}"` : "Bearer" };
	return err;
}

/** The `WWW-Authenticate` value a 401 of bearerRefused carries, else undefined. */
export function wwwAuthenticateOf(err: unknown): string | undefined {
	const e = err as { code?: unknown; data?: { wwwAuthenticate?: unknown } };
	return e?.code === 401 && typeof e.data?.wwwAuthenticate === "string" ? e.data.wwwAuthenticate : undefined;
}

export const notFound = (message = "document not found") => new ApiError(404, message);
export const conflict = (message: string) => new ApiError(409, message);

/** Moleculer's errors about reaching a service (not about what it did), by the status the client gets. */
const TRANSPORT_ERRORS: Record<string, number> = {
	ServiceNotFoundError: 503,
	ServiceNotAvailableError: 503,
	RequestRejectedError: 503,
	BrokerDisconnectedError: 503,
	QueueIsFullError: 503,
	// moleculer-web's, when the gateway finds no node for a route's action.
	ServiceUnavailableError: 503,
	RequestTimeoutError: 504,
	RequestSkippedError: 504,
};

export const UNAVAILABLE: Record<number, string> = {
	502: "service unavailable",
	503: "service unavailable",
	504: "request timed out",
};

/** A failure to reach a service (no node, node gone, timed out), not of what the service did. */
export function isTransportError(err: unknown): boolean {
	const name = (err as { name?: unknown })?.name;
	return typeof name === "string" && Object.prototype.hasOwnProperty.call(TRANSPORT_ERRORS, name);
}

/**
 * Turns anything thrown anywhere into the spec's error body. Unknown failures become a generic 500
 * body whose message reveals nothing of the internals; 4xx and 5xx codes set on purpose are kept.
 */
export function toErrorBody(err: unknown): ErrorBody {
	const e = err as { code?: unknown; message?: unknown; type?: unknown; name?: unknown; status?: unknown; limit?: unknown };
	let status = typeof e?.code === "number" ? e.code : typeof e?.status === "number" ? e.status : 500;
	if (status < 400 || status > 599) status = 500;
	let message = typeof e?.message === "string" && e.message ? e.message : (STATUS_NAMES[status] ?? "Error");
	// The body parser's failures, with messages that do not depend on the Node version.
	if (e?.type === "entity.parse.failed") {
		status = 400;
		message = "body must be valid JSON";
	}
	if (e?.type === "entity.too.large") {
		status = 413;
		message = bodyTooLarge(typeof e.limit === "number" ? e.limit : 1024 * 1024);
	}
	if (e?.type === "encoding.unsupported" || e?.type === "charset.unsupported") {
		status = 415;
		message = "body encoding is not supported";
	}
	// Moleculer's own errors that stand for bad input.
	if (e?.name === "ValidationError" || e?.type === "VALIDATION_ERROR") status = 400;
	// The broker's own failures name the action and the node in their messages: the client gets a fixed wording
	// (docs/api.md, "Errors"), the log keeps the original.
	const transport = isTransportError(err) ? TRANSPORT_ERRORS[e.name as string] : undefined;
	if (transport) status = transport;
	if (transport || (e?.name !== "ApiError" && (status === 502 || status === 503 || status === 504))) message = UNAVAILABLE[status] ?? message;
	// A dependency that is away (PostgreSQL restarting, a connection cut): the request may succeed later.
	if (status === 500 && isDependencyOutage(err)) {
		status = 503;
		message = "service unavailable";
	}
	if (status === 500) message = "internal error";
	return { statusCode: status, message, error: STATUS_NAMES[status] ?? "Error" };
}

/**
 * PostgreSQL's SQLSTATEs of a server that cannot serve now: connection exceptions (08), shutdown or start-up (57P01-03),
 * no free connection slot (53300), a lock or statement timeout or a session ended for idling in its transaction
 * (55P03, 57014, 25P03: runtime/relational.ts, behind a session that went silent); and the socket errors of a server that
 * is gone. Recognised by code and message, which survive the transporter, so a store failure on a domain node maps
 * here, at the gateway.
 */
const OUTAGE_SQLSTATE = /^(08...|57P0[123]|53300|55P03|57014|25P03)$/;
const OUTAGE_ERRNO = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "EHOSTUNREACH", "ENETUNREACH"]);
/** node-postgres's own messages for a connection that died or never came (they carry no code). */
const OUTAGE_MESSAGE = /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Query read timeout)/;

export function isDependencyOutage(err: unknown): boolean {
	const e = err as { code?: unknown; message?: unknown };
	if (typeof e?.code === "string" && (OUTAGE_SQLSTATE.test(e.code) || OUTAGE_ERRNO.has(e.code))) return true;
	return typeof e?.message === "string" && OUTAGE_MESSAGE.test(e.message);
}

/** Retry-After of a 503 when its cause names none: long enough for a reconnect or a failover, short enough to retry. */
export const DEFAULT_RETRY_AFTER_S = 2;

/**
 * Seconds for Retry-After: a 503 or 504 always gets one (the cause's own `data.retryAfter`, e.g. the cache's; for a
 * node that could not be reached, the heartbeat timeout when given: a dead node is dropped by then; else the default),
 * so a client backs off and comes back instead of giving up; a 429 the one it names itself (the failure limits of
 * services/auth); other statuses set theirs where they arise.
 */
export function retryAfterOf(err: unknown, statusCode: number, heartbeatTimeoutMs?: number): number | undefined {
	const s = (err as { data?: { retryAfter?: unknown } })?.data?.retryAfter;
	const named = typeof s === "number" && Number.isInteger(s) && s > 0 && s <= 3600 ? s : undefined;
	if (statusCode === 429) return (err as { code?: unknown })?.code === 429 ? named : undefined;
	if (statusCode !== 503 && statusCode !== 504) return undefined;
	if (named !== undefined) return named;
	if (heartbeatTimeoutMs !== undefined && isTransportError(err)) return Math.max(1, Math.ceil(heartbeatTimeoutMs / 1000));
	return DEFAULT_RETRY_AFTER_S;
}

/** A size as the limits' messages name it: binary units, as the limits are counted (1048576 bytes: `1 MiB`). */
export function sizeText(bytes: number): string {
	if (bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`;
	if (bytes % 1024 === 0) return `${bytes / 1024} KiB`;
	return `${bytes} bytes`;
}

/** The 413 of a body over its parser's limit, naming the limit (docs/api.md, "Limits"). */
export const bodyTooLarge = (bytes: number): string => `body must not be larger than ${sizeText(bytes)}`;
