/**
 * One webhook POST to a resolved, checked target: the connection goes to the pinned address (no second DNS lookup
 * that a rebinding resolver could answer differently; TLS still verifies the URL's host name), redirects are not
 * followed (a 3xx is a failure), and the whole exchange is bounded by a timeout.
 */
import http from "http";
import https from "https";
import type { LookupFunction } from "net";
import type { ResolvedTarget } from "../../lib/address-guard";

export interface PostResult {
	status: number | null;
	error: string | null;
	durationMs: number;
	/** True when the caller aborted (stop): not an attempt of the receiver. */
	aborted?: boolean;
}

export class Poster {
	private httpAgent = new http.Agent({ keepAlive: true, maxSockets: 64 });
	private httpsAgent = new https.Agent({ keepAlive: true, maxSockets: 64 });

	constructor(private timeoutMs: number) {}

	post(target: ResolvedTarget, headers: Record<string, string>, body: string, signal?: AbortSignal): Promise<PostResult> {
		const started = performance.now();
		const pinned: LookupFunction = (_host, opts, cb) => {
			if ((opts as { all?: boolean }).all) (cb as any)(null, [{ address: target.address, family: target.family }]);
			else cb(null, target.address, target.family);
		};
		const secure = target.url.protocol === "https:";
		return new Promise<PostResult>((resolve) => {
			let settled = false;
			const done = (r: Omit<PostResult, "durationMs">) => {
				if (settled) return;
				settled = true;
				clearTimeout(timer);
				signal?.removeEventListener("abort", onAbort);
				resolve({ ...r, durationMs: performance.now() - started });
			};
			const req = (secure ? https : http).request(target.url, {
				method: "POST",
				headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
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
				res.on("data", () => undefined);
				res.on("end", () => done({ status: res.statusCode ?? null, error: null }));
				res.on("error", () => done({ status: res.statusCode ?? null, error: null }));
				res.on("close", () => done({ status: res.statusCode ?? null, error: null }));
			});
			req.end(body);
		});
	}

	close(): void {
		this.httpAgent.destroy();
		this.httpsAgent.destroy();
	}
}
