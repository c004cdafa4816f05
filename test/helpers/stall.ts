/** Clients that open an SSE stream and never read it (resource limits tests). */
import http from "http";
import { keysOf, payloadOf, signWith } from "./auth";
import type { TestPlatform } from "./platform";

export interface Stalled {
	status: number;
	/** The error body when the status is not 200. */
	body?: any;
	contentType?: string;
	destroy(): void;
}

/** Opens `path` as an event stream and stops reading as soon as the headers came. */
export function stalledStream(base: string, path: string, token: string): Promise<Stalled> {
	return new Promise((resolve, reject) => {
		const req = http.get(base + path, { headers: { authorization: `Bearer ${token}`, accept: "text/event-stream" }, agent: false }, (res) => {
			const destroy = () => {
				res.destroy();
				req.destroy();
			};
			if (res.statusCode !== 200) {
				let text = "";
				res.setEncoding("utf8");
				res.on("data", (c) => (text += c));
				res.on("end", () => resolve({ status: res.statusCode!, body: JSON.parse(text), contentType: res.headers["content-type"], destroy }));
				return;
			}
			res.pause();
			resolve({ status: 200, contentType: res.headers["content-type"], destroy });
		});
		req.on("error", (err) => {
			if (!req.destroyed || (err as NodeJS.ErrnoException).code !== "ECONNRESET") reject(err);
		});
	});
}

/**
 * A token of another principal: the root token's claims with another `uid`, signed with the platform's key. The
 * grants follow the subjects (root's), the per-principal limits follow the uid.
 */
export function otherPrincipal(p: TestPlatform, rootToken: string, n: number): string {
	const { iat: _i, exp: _e, ...claims } = payloadOf(rootToken);
	return signWith(keysOf(p).jwtSecret, { ...claims, uid: `${String(claims.uid).slice(0, 16)}${String(n).padStart(8, "0")}` }, { expiresIn: 3600 });
}

/** Creates `count` notes of `kb` kilobytes each under `tag` (bulk requests under the 1 MB body limit). */
export async function bigNotes(p: TestPlatform, token: string, tag: string, count: number, kb: number): Promise<void> {
	const per = Math.max(1, Math.floor(900 / kb));
	for (let i = 0; i < count; i += per) {
		const items = Array.from({ length: Math.min(per, count - i) }, (_, j) => ({ title: `big ${i + j}`, content: "x".repeat(kb * 1024), tags: [tag] }));
		const r = await p.http("POST", "/content/notes/bulk", { token, body: { items } });
		if (r.status !== 200) throw new Error(`bulk create failed: ${r.status} ${r.text}`);
	}
}
