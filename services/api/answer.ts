/** The gateway's answers: JSON bodies, text, and every error in the spec's shape `{ statusCode, message, error }`. */
import type { ServerResponse } from "http";
import { ApiError, retryAfterOf, toErrorBody, wwwAuthenticateOf } from "../../lib/errors";
import { observeHttp } from "../../runtime/metrics";
import { emitAudit } from "../../events/audit-shipper";
import { callerIp } from "../../authority/authenticate";
import { answerText } from "../../engine/answer-cache";
import { answeredEarly, endAnswer } from "./early-answer";
import type { Gateway, Req, Res } from "./gateway";

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
	if (res.headersSent) {
		// An answer given early ends once the body is dropped (services/api/early-answer.ts), not now.
		if (!answeredEarly(res)) res.end();
		return;
	}
	const text = JSON.stringify(body);
	res.writeHead(status, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(text) });
	endAnswer(res, text);
}

export function sendJsonText(res: ServerResponse, text: string): void {
	res.writeHead(200, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(text) });
	res.end(text);
}

/** The gateway's answering methods (mixed into its `methods`). */
export const answerMethods = {
	/** moleculer-web's body encoder: a kept answer's text as it was made (engine/answer-cache.ts), else JSON. */
	encodeResponse(req: Req, res: Res, data: unknown) {
		return answerText(data) ?? JSON.stringify(data);
	},
	sendErrorBody(this: Gateway, req: Req, res: Res, err: unknown) {
		// Answered already, before the body's end: a later failure of the same request (the body parser's) is not news.
		if (answeredEarly(res)) return;
		// A body that does not inflate under its Content-Encoding: zlib's code (Z_DATA_ERROR...) is all that survives.
		const zlib = typeof (err as { code?: unknown })?.code === "string" && /^Z_/.test((err as { code: string }).code);
		if (zlib)
			err = new ApiError(
				400,
				`request body is not valid ${
					String(req.headers["content-encoding"] ?? "")
						.trim()
						.toLowerCase() || "compressed data"
				}`,
			);
		const body = toErrorBody(err);
		// The path only: the query string may carry a bearer (`?token=`), which must never reach a log.
		if (body.statusCode >= 500) this.logger.error("request failed", req.method, (req.url ?? "").split("?")[0], err);
		observeHttp(this.broker, req, body.statusCode);
		emitAudit(this.broker, req, body.statusCode, undefined, () => callerIp(req, this.cfg.trustProxy));
		const retryAfter = retryAfterOf(err, body.statusCode, this.cfg.heartbeatTimeoutMs);
		if (retryAfter !== undefined && !res.headersSent) res.setHeader("Retry-After", String(retryAfter));
		const challenge = wwwAuthenticateOf(err);
		if (challenge !== undefined && !res.headersSent) res.setHeader("WWW-Authenticate", challenge);
		sendJson(res, body.statusCode, body);
	},
	sendText(res: Res, status: number, body: string | Buffer, type: string) {
		res.writeHead(status, { "Content-Type": type, "Content-Length": Buffer.byteLength(body) });
		res.end(body);
	},
};
