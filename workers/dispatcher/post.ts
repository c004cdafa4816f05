/**
 * One webhook POST to a resolved, checked target: the connection goes to the pinned address (no second DNS lookup
 * that a rebinding resolver could answer differently; TLS still verifies the URL's host name), redirects are not
 * followed (a 3xx is a failure), and the whole exchange is bounded by a timeout.
 */
import http from "http";
import https from "https";
import type { LookupFunction } from "net";
import type { ResolvedTarget } from "../../runtime/address-guard";

export interface PostResult {
	status: number | null;
	error: string | null;
	durationMs: number;
	/** True when the caller aborted (stop): not an attempt of the receiver. */
	aborted?: boolean;
}

/** The request line's target and the Host header of a URL (what `http.request(url)` derives, computed once per URL). */
interface UrlParts {
	hostname: string;
	port: string;
	path: string;
	host: string;
}

export class Poster {
	private httpAgent = new http.Agent({ keepAlive: true, maxSockets: 64 });
	private httpsAgent = new https.Agent({ keepAlive: true, maxSockets: 64 });
	private parts = new WeakMap<URL, UrlParts>();

	constructor(private timeoutMs: number) {}

	/**
	 * `body` is sent as its UTF-8 bytes (give the Buffer the signature was computed over: it is not encoded again).
	 * Headers go out in the order given, then `content-length`, `host` and Node's `connection`.
	 */
	post(target: ResolvedTarget, headers: Record<string, string>, body: string | Buffer, signal?: AbortSignal): Promise<PostResult> {
		const started = performance.now();
		const pinned: LookupFunction = (_host, opts, cb) => {
			if ((opts as { all?: boolean }).all) cb(null, [{ address: target.address, family: target.family }]);
			else cb(null, target.address, target.family);
		};
		const secure = target.url.protocol === "https:";
		const bytes = typeof body === "string" ? Buffer.from(body) : body;
		const url = this.partsOf(target.url);
		// A flat header list: Node writes it as is, without a setHeader (name check, lower-casing, map) per header.
		const raw: string[] = [];
		for (const name in headers) raw.push(name, headers[name]);
		raw.push("content-length", String(bytes.length), "host", url.host);
		return new Promise<PostResult>((resolve) => {
			let settled = false;
			const done = (r: Omit<PostResult, "durationMs">) => {
				if (settled) return;
				settled = true;
				clearTimeout(timer);
				signal?.removeEventListener("abort", onAbort);
				resolve({ ...r, durationMs: performance.now() - started });
			};
			const req = (secure ? https : http).request({
				protocol: target.url.protocol,
				hostname: url.hostname,
				port: url.port,
				path: url.path,
				method: "POST",
				headers: raw,
				lookup: pinned,
				agent: secure ? this.httpsAgent : this.httpAgent,
			});
			const timer = setTimeout(() => {
				req.destroy(new Error(`timed out after ${this.timeoutMs} ms`));
			}, this.timeoutMs);
			const onAbort = () => {
				req.destroy(new Error("aborted"));
				done({ status: null, error: "aborted", aborted: true });
			};
			if (signal?.aborted) return onAbort();
			signal?.addEventListener("abort", onAbort, { once: true });
			req.on("error", (err: NodeJS.ErrnoException) => done({ status: null, error: err.code ? `${err.code}: ${err.message}` : err.message }));
			req.on("response", (res) => {
				// The body is drained (and ignored) so the connection can be reused; the status decides.
				const status = res.statusCode ?? null;
				const finish = () => done({ status, error: null });
				res.resume();
				res.on("end", finish);
				res.on("error", finish);
				res.on("close", finish);
			});
			req.end(bytes);
		});
	}

	private partsOf(u: URL): UrlParts {
		let p = this.parts.get(u);
		if (!p) {
			// As http.request(url) does: an IPv6 literal without its brackets, the path with the query string.
			const hostname = u.hostname.startsWith("[") ? u.hostname.slice(1, -1) : u.hostname;
			p = { hostname, port: u.port, path: `${u.pathname}${u.search}`, host: u.host };
			this.parts.set(u, p);
		}
		return p;
	}

	close(): void {
		this.httpAgent.destroy();
		this.httpsAgent.destroy();
	}
}
