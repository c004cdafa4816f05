/**
 * The peer bench's data set on a running platform (shared by bench scenarios): `users` users holding the role
 * `@bench`, read and write grants on content:notes for that role, `perUser` 1 KB notes written by each user with its
 * own token (bulk), every 10th note of each user soft-deleted. Returns user 0's token and ids.
 */
import { kbNote } from "./create";

export interface PeerSeed {
	/** User 0's access token. */
	token: string;
	/** User 0's live note ids. */
	live: string[];
	/** User 0's soft-deleted note ids. */
	deleted: string[];
}

/** The platform's JSON answer, as the caller says it is shaped (`T`). */
async function call<T = unknown>(base: string, method: string, p: string, body: unknown, headers: Record<string, string>): Promise<T> {
	const r = await fetch(`${base}${p}`, { method, headers: { "content-type": "application/json", ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
	if (r.status !== 200) throw new Error(`${method} ${p}: ${r.status} ${await r.text()}`);
	return r.json() as Promise<T>;
}

export async function peerSeed(base: string, rootAuth: Record<string, string>, domain: string, clientId: string, users = 100, perUser = 100): Promise<PeerSeed> {
	for (const action of ["read", "write"]) await call(base, "POST", "/auth/grants", { subject: `@bench@${domain}`, action, object: "content:notes" }, rootAuth);
	let first: PeerSeed | undefined;
	for (let u = 0; u < users; u++) {
		const username = `bench-user-${u}`;
		const password = `Bench#user-${u}-pw`;
		await call(base, "POST", "/identity/users", { username, password, email: `${username}@bench.local`, subjects: ["@bench"] }, rootAuth);
		const login = await call<{ data: { access_token: string } }>(base, "POST", "/auth/token", { grant_type: "password", client_id: clientId, username, password }, {});
		const auth = { authorization: `Bearer ${login.data.access_token}` };
		const items = Array.from({ length: perUser }, (_, i) => kbNote(u * perUser + i));
		const ids = (await call<{ items: { id: string }[] }>(base, "POST", "/content/notes/bulk", { items }, auth)).items.map((x) => x.id);
		const deleted = ids.filter((_, i) => i % 10 === 9);
		for (const id of deleted) await call(base, "DELETE", `/content/notes/${id}`, undefined, auth);
		if (u === 0) first = { token: login.data.access_token, live: ids.filter((_, i) => i % 10 !== 9), deleted };
	}
	return first!;
}
