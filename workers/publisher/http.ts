/**
 * One outbound HTTP request of the delivery engine (push services, SMS providers) through the address guard
 * (runtime/address-guard.ts): http(s) only, every resolved address public unless WEBHOOK_ALLOW_PRIVATE=1, the connection
 * pinned to the checked address, no redirects, bounded in time and answer size. `ca`: the certificates trusted for https
 * (Node's default ones plus TLS_CA_FILE's), when set.
 */
import http from "http";
import https from "https";
import type { LookupFunction } from "net";
import { resolveTarget } from "../../runtime/address-guard";

export interface HttpAnswer {
	status: number | null;
	body: string;
	error: string | null;
	/** The address guard refused the URL (permanent). */
	refused?: boolean;
	/** Why, for the server log only (what the host resolved to): `error` is what the record keeps. */
	detail?: string;
}

const MAX_ANSWER = 64 * 1024;

export async function guardedRequest(
	raw: string,
	method: string,
	headers: Record<string, string>,
	body: string | Buffer | null,
	allowPrivate: boolean,
	timeoutMs: number,
	ca?: string[],
): Promise<HttpAnswer> {
	let target;
	try {
		target = await resolveTarget(raw, allowPrivate);
	} catch (err) {
		const e = err as Error & { detail?: string };
		return { status: null, body: "", error: e.message.replace(/^webhook/, "address"), refused: e.name === "AddressRefused", detail: e.detail?.replace(/^webhook/, "address") };
	}
	const pinned: LookupFunction = (_host, opts, cb) => {
		if ((opts as { all?: boolean }).all) cb(null, [{ address: target.address, family: target.family }]);
		else cb(null, target.address, target.family);
	};
	const secure = target.url.protocol === "https:";
	return new Promise<HttpAnswer>((resolve) => {
		let settled = false;
		const done = (a: HttpAnswer) => {
			if (settled) return;
			settled = true;
			clearTimeout(timer);
			resolve(a);
		};
		const req = (secure ? https : http).request(target.url, {
			method,
			headers: { ...headers, "content-length": String(body ? Buffer.byteLength(body) : 0) },
			lookup: pinned,
			agent: false,
			// TLS_CA_FILE: extra trusted CAs, added to the default ones (verification is never turned off).
			...(secure && ca ? { ca } : {}),
		});
		const timer = setTimeout(() => req.destroy(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs);
		req.on("error", (err: NodeJS.ErrnoException) => done({ status: null, body: "", error: err.code ?? err.message }));
		req.on("response", (res) => {
			const chunks: Buffer[] = [];
			let size = 0;
			res.on("data", (c: Buffer) => {
				size += c.length;
				if (size <= MAX_ANSWER) chunks.push(c);
			});
			const end = () => done({ status: res.statusCode ?? null, body: Buffer.concat(chunks).toString("utf8"), error: null });
			res.on("end", end);
			res.on("error", end);
			res.on("close", end);
		});
		req.end(body ?? undefined);
	});
}
