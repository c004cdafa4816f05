/**
 * The gateway's side of files (docs/files.md), mixed into the api service's methods:
 * - upload: the multipart body is parsed as it arrives (busboy) and each `file` part is streamed to
 *   `special.files.upload` as a Moleculer stream param (across the transporter too), never buffered whole; a part
 *   over FILE_MAX_BYTES answers 413 at once, without reading the rest of the body into memory.
 * - download: public; a bearer is looked at only to pass its claims on (a bad one counts as none), and every refusal
 *   is a 404 decided by `special.files.download`, whose content stream is piped to the response.
 */
import type { IncomingMessage, ServerResponse } from "http";
import type { Readable } from "stream";
import busboy from "busboy";
import { ApiError, badRequest } from "../../lib/errors";
import { observeHttp } from "../../lib/metrics";
import { emitAudit } from "../../lib/audit";
import { bearerOf } from "../auth/authenticate";
import type { DownloadHead, UploadPart } from "../special/files";

type Req = IncomingMessage & { $ctx: any; $params: any; query?: Record<string, unknown> };
type Res = ServerResponse;

/** File parts one upload request may carry. */
export const MAX_FILES = 10;
/** Bytes of request body read (and dropped) after an early answer, so the client can read it; then the socket closes. */
const DRAIN_LIMIT = 16 * 1024 * 1024;

const ignore = () => undefined;

/** After an early answer (413, 403...): drop what the client still sends, up to DRAIN_LIMIT, then cut the connection. */
function drain(req: Req): void {
	let seen = 0;
	req.on("data", (c: Buffer) => {
		seen += c.length;
		if (seen > DRAIN_LIMIT) req.socket.destroy();
	});
	req.resume();
}

export const fileMethods = {
	async handleUpload(this: any, req: Req, res: Res, action: string): Promise<void> {
		const ctx = req.$ctx;
		const max: number = this.cfg.fileMaxBytes;
		if (!/^multipart\/form-data\b/i.test(String(req.headers["content-type"] ?? ""))) throw new ApiError(415, "body must be multipart/form-data");
		const length = Number(req.headers["content-length"]);
		if (Number.isFinite(length) && length > MAX_FILES * (max + 64 * 1024)) {
			res.setHeader("Connection", "close");
			drain(req);
			throw new ApiError(413, `file is larger than ${max} bytes`);
		}
		let bb: busboy.Busboy;
		try {
			bb = busboy({ headers: req.headers, limits: { fileSize: max + 1, files: MAX_FILES, fields: 2 * MAX_FILES, fieldSize: 2000, parts: 3 * MAX_FILES } });
		} catch (err) {
			throw badRequest(`body is not valid multipart/form-data: ${(err as Error).message}`);
		}
		const items: unknown[] = [];
		let failed: unknown;
		let nextName: string | undefined;
		let chain: Promise<void> = Promise.resolve();
		const fail = (err: unknown) => {
			failed ??= err;
		};
		const done = new Promise<void>((resolve) => {
			bb.on("field", (name, value) => {
				if (name === "name") nextName = value;
				else fail(badRequest(`${name} is not allowed: the form takes file parts and name fields`));
			});
			bb.on("file", (field, stream, info) => {
				// Listened to from the moment it exists: busboy destroys a part with an error when the form ends inside it
				// or the client goes away, possibly before the call below consumes it (the authority check is awaited
				// first); unheard, that error would end the process. The request learns of it through busboy's own
				// 'error' (a malformed or truncated form) or the call's rejection (the consumer's pipeline).
				stream.on("error", ignore);
				if (field !== "file" || failed) {
					if (!failed) fail(badRequest(`${field} is not allowed: file parts are named file`));
					stream.resume();
					return;
				}
				const meta: UploadPart = { name: nextName ?? info.filename, declared: info.mimeType };
				nextName = undefined;
				// Parts arrive one after another (the next cannot start before this one is read), each its own call.
				chain = chain.then(async () => {
					if (failed) return void stream.resume();
					try {
						items.push(await ctx.call(action, stream as Readable, { meta: { file: meta } }));
					} catch (err) {
						fail(err);
						stream.resume();
						resolve(); // answer now: the rest of the body is not needed
					}
				});
			});
			bb.on("filesLimit", () => fail(badRequest(`at most ${MAX_FILES} files per upload`)));
			bb.on("partsLimit", () => fail(badRequest(`at most ${MAX_FILES} files per upload`)));
			bb.on("close", () => void chain.then(() => resolve()));
			bb.on("error", (err: Error) => {
				fail(badRequest(`body is not valid multipart/form-data: ${err.message}`));
				void chain.then(() => resolve());
			});
		});
		// A client that goes away mid-body: the part being stored fails at once (its spool file is removed), not at a timeout.
		const gone = () => {
			if (!req.complete) bb.destroy(new Error("the client went away"));
		};
		req.once("close", gone);
		req.pipe(bb);
		await done;
		req.off("close", gone);
		if (failed) {
			req.unpipe(bb);
			if (!req.complete) {
				res.setHeader("Connection", "close");
				drain(req);
			}
			throw failed;
		}
		if (!items.length) throw badRequest("file is required");
		const body = JSON.stringify({ items, total: items.length });
		res.writeHead(200, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(body) });
		res.end(body);
		observeHttp(this.broker, req, 200);
		emitAudit(this.broker, req, 200);
	},

	async handleDownload(this: any, req: Req, res: Res, action: string): Promise<void> {
		const ctx = req.$ctx;
		const params = req.$params ?? {};
		if (bearerOf(req)) {
			try {
				ctx.meta.token = (await this.authenticator.authenticate(req)).token;
			} catch {
				ctx.meta.token = undefined; // a bad bearer is no bearer: the key may still open the file, else 404
			}
		}
		const key = typeof params.query?.key === "string" ? params.query.key : undefined;
		const stream = (await ctx.call(action, {
			id: String(params.params?.id ?? ""),
			key,
			range: typeof req.headers.range === "string" ? req.headers.range : undefined,
			ifNoneMatch: typeof req.headers["if-none-match"] === "string" ? req.headers["if-none-match"] : undefined,
		})) as Readable | null;
		const head = ctx.meta.$download as DownloadHead | undefined;
		if (!head) throw new ApiError(404, "document not found");
		if (head.status === 416) {
			res.setHeader("Content-Range", head.headers["Content-Range"]);
			throw new ApiError(416, "range not satisfiable");
		}
		res.writeHead(head.status, head.headers);
		observeHttp(this.broker, req, head.status);
		emitAudit(this.broker, req, head.status);
		if (!stream || req.method === "HEAD") {
			stream?.destroy();
			res.end();
			return;
		}
		res.on("close", () => {
			if (!res.writableFinished) stream.destroy();
		});
		stream.on("error", () => res.destroy());
		stream.pipe(res);
	},
};


