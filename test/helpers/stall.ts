/** Clients that open an SSE stream and never read it (resource limits tests). */
import http from "http";
import { createUser, keysOf, payloadOf, signWith } from "./auth";
import { unique } from "./samples";
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
 * Tokens of other principals: users of root's domain made for the test, holding a role granted to manage
 * content:notes, and tokens carrying root's claims with each user's `uid` and subjects, signed with the platform's key.
 * Real users, since a bearer is honoured only as its user is now (a uid that names no user is refused); the
 * per-principal limits follow the uid. Costs root `count + 1` requests.
 */
export async function otherPrincipals(p: TestPlatform, rootToken: string, count: number): Promise<string[]> {
	const { iat: _i, exp: _e, ...claims } = payloadOf(rootToken);
	const role = `@other-${unique()}`;
	const g = await p.http("POST", "/auth/grants", { token: rootToken, body: { subject: `${role}@${claims.domain}`, action: "manage", object: "content:notes" } });
	if (g.status !== 200) throw new Error(`grant for ${role} failed: ${g.status} ${g.text}`);
	const tokens: string[] = [];
	for (let n = 0; n < count; n++) {
		const user = await createUser(p.http, rootToken, { username: `other-${unique()}-${n}`, password: `pw-${unique()}-long`, subjects: [role] });
		tokens.push(signWith(keysOf(p).jwtSecret, { ...claims, uid: user.id, subject: `${role}@${claims.domain} ${user.id}@${claims.domain}` }, { expiresIn: 3600 }));
	}
	return tokens;
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
