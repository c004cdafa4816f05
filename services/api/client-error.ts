/**
 * Requests Node's HTTP parser refuses before any handler runs (a malformed chunked body, a body cut short of its
 * Content-Length, headers too large, a request too slow to arrive): answered in the spec's error shape
 * `{ statusCode, message, error }` rather than Node's bare `400 Bad Request`, when nothing of another answer has left
 * on the connection; then the connection closes.
 */
import type { Socket } from "net";
import { toErrorBody, ApiError } from "../../lib/errors";

const ANSWERS: Record<string, [number, string]> = {
	HPE_HEADER_OVERFLOW: [431, "request headers are too large"],
	ERR_HTTP_REQUEST_TIMEOUT: [408, "request timed out"],
	HPE_INVALID_EOF_STATE: [400, "the request ended before its body was complete"],
};

const REASONS: Record<number, string> = { 400: "Bad Request", 408: "Request Timeout", 431: "Request Header Fields Too Large" };

export function answerClientError(err: Error & { code?: string }, socket: Socket): void {
	const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
	if (err.code !== "ECONNRESET" && socket.writable && !inFlight?.headersSent) {
		const [status, message] = ANSWERS[err.code ?? ""] ?? [400, "malformed HTTP request"];
		const body = JSON.stringify(toErrorBody(new ApiError(status, message)));
		// Flushed, then the connection goes (what else the client sends is not read).
		socket.end(
			`HTTP/1.1 ${status} ${REASONS[status]}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
			() => socket.destroy(),
		);
		return;
	}
	socket.destroy();
}
