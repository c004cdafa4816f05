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
export const notFound = (message = "document not found") => new ApiError(404, message);
export const conflict = (message: string) => new ApiError(409, message);

/** Moleculer's errors about reaching a service (not about what it did), by the status the client gets. */
const TRANSPORT_ERRORS: Record<string, number> = {
	ServiceNotFoundError: 503,
	ServiceNotAvailableError: 503,
	RequestRejectedError: 503,
	BrokerDisconnectedError: 503,
	QueueIsFullError: 503,
	RequestTimeoutError: 504,
	RequestSkippedError: 504,
};

export const UNAVAILABLE: Record<number, string> = {
	502: "service unavailable",
	503: "service unavailable",
	504: "request timed out",
};

/** Seconds a client should wait before repeating a request that met a 503/504: a dead node is dropped by then. */
export function retryAfterSeconds(status: number, heartbeatTimeoutMs: number): number | undefined {
	return status === 503 || status === 504 ? Math.max(1, Math.ceil(heartbeatTimeoutMs / 1000)) : undefined;
}

/**
 * Turns anything thrown anywhere into the spec's error body. Unknown failures become a generic 500
 * body whose message reveals nothing of the internals; 4xx and 5xx codes set on purpose are kept.
 */
export function toErrorBody(err: unknown): ErrorBody {
	const e = err as { code?: unknown; message?: unknown; type?: unknown; name?: unknown; status?: unknown };
	let status = typeof e?.code === "number" ? e.code : typeof e?.status === "number" ? e.status : 500;
	if (status < 400 || status > 599) status = 500;
	let message = typeof e?.message === "string" && e.message ? e.message : STATUS_NAMES[status] ?? "Error";
	// The body parser's failures, with messages that do not depend on the Node version.
	if (e?.type === "entity.parse.failed") {
		status = 400;
		message = "body must be valid JSON";
	}
	if (e?.type === "entity.too.large") {
		status = 413;
		message = "body must not be larger than 1 MB";
	}
	if (e?.type === "encoding.unsupported" || e?.type === "charset.unsupported") {
		status = 415;
		message = "body encoding is not supported";
	}
	// Moleculer's own errors that stand for bad input.
	if (e?.name === "ValidationError" || e?.type === "VALIDATION_ERROR") status = 400;
	// The broker's own failures name the action and the node in their messages: the client gets a fixed wording
	// (docs/api.md, "Errors"), the log keeps the original.
	const transport = typeof e?.name === "string" ? TRANSPORT_ERRORS[e.name] : undefined;
	if (transport) status = transport;
	if (transport || (e?.name !== "ApiError" && (status === 502 || status === 503 || status === 504))) message = UNAVAILABLE[status] ?? message;
	if (status === 500) message = "internal error";
	return { statusCode: status, message, error: STATUS_NAMES[status] ?? "Error" };
}
