/**
 * The embedded broker's per-message decision alone (workers/preserver/forward.ts), in this process: FORWARD_MESSAGES
 * changes of a note on its client topic, each decided for FORWARD_HOLDERS token holders of that client (one read grant
 * each, among 2 000 grants of other subjects), with unrestricted grants (the payload delivered as published) and with
 * grants limited to `title` (a narrower payload). Prints the CPU time (this process's user + system: less
 * sensitive to a loaded machine than the wall time, printed too) per delivery for three rounds of each.
 *
 * `npx tsx bench/mqtt-forward.ts`
 */
import { GrantIndex, type Grant } from "../lib/grants";
import type { TokenClaims } from "../lib/types";
import { ForwardViews } from "../workers/preserver/forward";

const HOLDERS = Number(process.env.FORWARD_HOLDERS ?? 1000);
const MESSAGES = Number(process.env.FORWARD_MESSAGES ?? 200);
const CID = "64c000000000000000000002";
const hex = (prefix: string, i: number) => `${prefix}${i.toString(16).padStart(24 - prefix.length, "0")}`;

const users = Array.from({ length: HOLDERS }, (_, i) => hex("64a", i));
const others: Grant[] = Array.from({ length: 2000 }, (_, i) => ({ subject: `${hex("64b", i)}@d.local`, action: "read", object: "content:posts" }));
const indexes = {
	whole: new GrantIndex([...users.map((u): Grant => ({ subject: `${u}@d.local`, action: "read", object: "content:notes" })), ...others]),
	narrowed: new GrantIndex([...users.map((u): Grant => ({ subject: `${u}@d.local`, action: "read", object: "content:notes", field: ["title"] })), ...others]),
};
const holders = users.map((uid) => ({
	views: new ForwardViews("platform"),
	token: { type: "access", strict: false, cid: CID, uid, scope: "whole", domain: "d.local", subject: `${uid}@d.local`, session: "s", client_id: CID } as TokenClaims,
}));

function message(i: number): { topic: string; payload: Buffer } {
	const id = hex("64f", i);
	const image = (title: string, content: string) => ({ id, owner: users[0], shares: [], clients: [CID], title, content, deleted_at: null });
	const event = {
		id,
		ts_ms: Date.now(),
		op: "u",
		topic: "content.notes",
		source: { name: "platform", db: "content", collection: "notes" },
		before: image("a", "x".repeat(300)),
		after: image("b", "y".repeat(300)),
	};
	return { topic: `platform/client/${CID}/content/notes/${id}`, payload: Buffer.from(JSON.stringify(event)) };
}

for (const [name, index] of Object.entries(indexes)) {
	for (let round = 1; round <= 3; round++) {
		const t0 = process.hrtime.bigint();
		const cpu0 = process.cpuUsage();
		for (let m = 0; m < MESSAGES; m++) {
			const { topic, payload } = message(m);
			for (const h of holders) if (!h.views.payloadFor(h.token, index, topic, payload)) throw new Error("a holder's message was withheld");
		}
		const n = MESSAGES * HOLDERS;
		const cpu = process.cpuUsage(cpu0);
		const wall = Number(process.hrtime.bigint() - t0) / 1000 / n;
		console.log(
			`${name}, round ${round}: ${((cpu.user + cpu.system) / n).toFixed(1)} µs of CPU, ${wall.toFixed(1)} µs wall per delivery (${MESSAGES} messages x ${HOLDERS} holders)`,
		);
	}
}
