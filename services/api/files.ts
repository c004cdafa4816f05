/**
 * The gateway's side of files (docs/files.md), mixed into the api service's methods:
 * - upload: the multipart body is parsed as it arrives (busboy) and each `file` part is streamed to
 *   `special.files.upload` as a Moleculer stream param (across the transporter too), never buffered whole; a part
 *   over FILE_MAX_BYTES answers 413 at once, without reading the rest of the body into memory. Under an
 *   `Idempotency-Key` (services/api/idempotency.ts, "streamed"): the key is claimed before the body is read, each part
 *   is hashed as it streams by, and the parsed form (fields; file parts' field, filename, type and SHA-256) completes
 *   the fingerprint; a repeat reads its body only to hash it (nothing stored) and replays, or answers 422.
 * - download: public; a bearer is looked at only to pass its claims on (a bad one counts as none), and every refusal
 *   is a 404 decided by `special.files.download`, whose content stream is piped to the response.
 */
import { createHash } from "crypto";
import type { ServerResponse } from "http";
import type { ServiceBroker } from "moleculer";
import type { PlatformConfig } from "../../runtime/config";
import { Transform, type Readable } from "stream";
import busboy from "busboy";
import { ApiError, badRequest, toErrorBody } from "../../lib/errors";
import { observeHttp } from "../../runtime/metrics";
import { emitAudit } from "../../events/audit-shipper";
import { bearerOf, type Authenticator } from "../../authority/authenticate";
import type { DownloadHead, UploadPart } from "../special/files";
import { Idempotency, type StreamedClaim } from "./idempotency";
import type { GatewayRequest } from "./web";

type Req = GatewayRequest;
type Res = ServerResponse;

/** The gateway's parts these methods use (they run as the api service's methods). */
interface FileHost {
	broker: ServiceBroker;
	cfg: PlatformConfig;
	idempotency: Idempotency;
	authenticator: Authenticator;
	uploadAnswered(req: Req, status: number): void;
}

/** File parts one upload request may carry. */
export const MAX_FILES = 10;
const ignore = () => undefined;

/** A part of the form as the upload's fingerprint sees it: a field, or a file part and the SHA-256 of its bytes. */
type PartPrint = { field: string; value: string } | { file: string; filename?: string; type: string; sha256?: string };
type FilePrint = Extract<PartPrint, { file: string }>;

/** The part's bytes, hashed into `print.sha256` as they pass (set once the part has been read to its end). */
function hashed(stream: Readable, print: FilePrint): Transform {
	const hash = createHash("sha256");
	const tee = new Transform({
		transform(chunk: Buffer, _enc, cb) {
			hash.update(chunk);
			cb(null, chunk);
		},
		flush(cb) {
			print.sha256 = hash.digest("hex");
			cb();
		},
	});
	// The part's error (a form cut inside it) reaches the tee before the action may have begun to read it (calls are
	// chained, the authority check is awaited first): listened to from the start, as the part itself is, so an
	// unheard 'error' never ends the process; the action's read learns of it through the destroyed stream.
	tee.on("error", ignore);
	stream.on("error", (err) => tee.destroy(err));
	return stream.pipe(tee);
}

/** A part nobody stores (a repeat's, or one after a refusal): read and hashed; `over` is called past `max` bytes. */
function digest(stream: Readable, print: FilePrint, max: number, over: () => void): void {
	const hash = createHash("sha256");
	let size = 0;
	stream.on("data", (chunk: Buffer) => {
		size += chunk.length;
		hash.update(chunk);
	});
	stream.on("end", () => {
		if (size > max) over();
		else print.sha256 = hash.digest("hex");
	});
}

/** What reading an upload's form came to. */
interface FormRead {
	items: unknown[];
	failed?: unknown;
	prints: PartPrint[];
	/** The body was parsed to its end and every file part hashed: its fingerprint is complete. */
	whole: boolean;
}

/**
 * Reads the form: each `file` part goes to `store` (the upload action, one call per part, in order) hashed as it
 * streams by; without `store` (a repeat) or after a refusal, parts are only hashed. Answers as soon as a part is
 * refused (the rest of the body is not needed).
 */
async function readForm(req: Req, bb: busboy.Busboy, max: number, store?: (stream: Readable, meta: UploadPart) => Promise<unknown>): Promise<FormRead> {
	const form: FormRead = { items: [], prints: [], whole: false };
	let nextName: string | undefined;
	let chain: Promise<void> = Promise.resolve();
	/** Answered early, or a part dropped or cut short by a limit: the form read is not the form sent. */
	let cut = false;
	const fail = (err: unknown) => {
		form.failed ??= err;
	};
	const done = new Promise<void>((resolve) => {
		/** Answer now: the rest of the body is not needed. */
		const stop = (err: unknown) => {
			fail(err);
			cut = true;
			resolve();
		};
		bb.on("field", (name, value, info) => {
			if (info.nameTruncated || info.valueTruncated) cut = true;
			form.prints.push({ field: name, value });
			if (name === "name") nextName = value;
			else fail(badRequest(`${name} is not allowed: the form takes file parts and name fields`));
		});
		bb.on("file", (field, stream, info) => {
			// Listened to from the moment it exists: busboy destroys a part with an error when the form ends inside it
			// or the client goes away, possibly before the call below consumes it (the authority check is awaited
			// first); unheard, that error would end the process. The request learns of it through busboy's own
			// 'error' (a malformed or truncated form) or the call's rejection (the consumer's pipeline).
			stream.on("error", ignore);
			const print: FilePrint = { file: field, filename: info.filename, type: info.mimeType };
			form.prints.push(print);
			if (field !== "file") fail(badRequest(`${field} is not allowed: file parts are named file`));
			const meta: UploadPart = { name: nextName ?? info.filename, declared: info.mimeType };
			nextName = undefined;
			if (!store || form.failed) return digest(stream, print, max, () => stop(new ApiError(413, `file is larger than ${max} bytes`)));
			// Parts arrive one after another (the next cannot start before this one is read), each its own call.
			const content = hashed(stream, print);
			chain = chain.then(async () => {
				if (form.failed) return void content.resume();
				try {
					form.items.push(await store(content, meta));
				} catch (err) {
					stream.unpipe(content);
					stream.resume();
					stop(err);
				}
			});
		});
		const tooMany = () => {
			cut = true;
			fail(badRequest(`at most ${MAX_FILES} files per upload`));
		};
		bb.on("filesLimit", tooMany);
		bb.on("partsLimit", tooMany);
		bb.on("fieldsLimit", () => void (cut = true));
		bb.on(
			"close",
			() =>
				void chain.then(() => {
					form.whole = !cut && form.prints.every((p) => !("file" in p) || p.sha256 !== undefined);
					resolve();
				}),
		);
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
	if (form.failed) req.unpipe(bb);
	return form;
}

export const fileMethods = {
	async handleUpload(this: FileHost, req: Req, res: Res, action: string): Promise<void> {
		const max = this.cfg.fileMaxBytes;
		if (!/^multipart\/form-data\b/i.test(String(req.headers["content-type"] ?? ""))) throw new ApiError(415, "body must be multipart/form-data");
		const length = Number(req.headers["content-length"]);
		// Answers given before the body's end are closed once the rest is dropped, bounded (services/api/early-answer.ts).
		if (Number.isFinite(length) && length > MAX_FILES * (max + 64 * 1024)) throw new ApiError(413, `file is larger than ${max} bytes`);
		let bb: busboy.Busboy;
		try {
			bb = busboy({ headers: req.headers, limits: { fileSize: max + 1, files: MAX_FILES, fields: 2 * MAX_FILES, fieldSize: 2000, parts: 3 * MAX_FILES } });
		} catch (err) {
			throw badRequest(`body is not valid multipart/form-data: ${(err as Error).message}`);
		}
		const idem = this.idempotency;
		const claim: StreamedClaim | undefined = await idem.claimStreamed(req, action);
		// A repeat of a request answered before its body was read: nothing to compare, its answer again.
		if (claim?.rec && !Idempotency.comparesBody(claim)) return await idem.replayStreamed(req, res, claim, undefined);
		// A repeat reads its body only to hash it: nothing is stored. A keyed upload holds its key while its parts arrive.
		const store = (stream: Readable, meta: UploadPart) => req.$ctx.call(action, stream, { meta: { file: meta } });
		let answer: unknown;
		let failed: unknown;
		try {
			const form = await readForm(req, bb, max, claim?.rec ? undefined : store);
			const fp = form.whole ? idem.streamedFingerprint(req, form.prints) : undefined;
			if (claim?.rec) {
				// A form that could not be read to its end (a file over the limit, a malformed body) cannot be compared.
				if (!fp) throw form.failed ?? badRequest("body is not valid multipart/form-data");
				return await idem.replayStreamed(req, res, claim, fp);
			}
			failed = form.failed ?? (form.items.length ? undefined : badRequest("file is required"));
			answer = failed ? toErrorBody(failed) : { items: form.items, total: form.items.length };
			if (claim)
				await idem.completeStreamed(
					claim,
					failed ? (answer as { statusCode: number }).statusCode : 200,
					answer,
					fp,
					form.items.map((f) => (f as { id: string }).id),
				);
		} finally {
			if (claim) Idempotency.settled(claim);
		}
		if (failed) throw failed;
		const body = JSON.stringify(answer);
		res.writeHead(200, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(body) });
		res.end(body);
		this.uploadAnswered(req, 200);
	},

	uploadAnswered(this: FileHost, req: Req, status: number): void {
		observeHttp(this.broker, req, status);
		emitAudit(this.broker, req, status);
	},

	async handleDownload(this: FileHost, req: Req, res: Res, action: string): Promise<void> {
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
