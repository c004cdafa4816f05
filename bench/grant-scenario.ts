/**
 * The grant-decision scenario of the micro-benchmark (bench/micro.ts) and of the grant index's unit test
 * (test/unit/grants.test.ts, which checks its decisions, never its speed): a caller whose role holds a tenth of the
 * store's grants, on other objects, beside its five grants that matter; the rest belong to other subjects.
 */
import type { Grant } from "../lib/grants";
import type { TokenClaims } from "../lib/types";

export const SCENARIO_UID = "a1a1a1a1a1a1a1a1a1a1a1a1";

export const scenarioToken: TokenClaims = {
	type: "access",
	strict: false,
	cid: "c0c0c0c0c0c0c0c0c0c0c0c0",
	uid: SCENARIO_UID,
	scope: "whole",
	domain: "root.local",
	subject: `@editor@root.local ${SCENARIO_UID}@root.local alice@root.local`,
	session: "s1",
	client_id: "c0c0c0c0c0c0c0c0c0c0c0c0",
	department: "sales",
	profile: { region: "eu" },
};

/** What the caller asks for: read on content:notes from 10.2.3.4 (inside its grant's location). */
export const scenarioRequest = { subjects: scenarioToken.subject.split(" "), action: "read", object: "content:notes", ip: "10.2.3.4", token: scenarioToken };

/** `total` grants: the caller's five, then the role's and other subjects' grants on other objects. */
export function scenarioGrants(total: number): Grant[] {
	const grants: Grant[] = [
		{ subject: "@editor@root.local", action: "write", object: "content:notes", field: ["title", "content"], filter: ['{"owner":"{{token.uid}}"}'] },
		{ subject: "alice@root.local", action: "read", object: "content:*", field: ["tags"], filter: ['{"department":"{{token.department}}"}'] },
		{ subject: `${SCENARIO_UID}@root.local`, action: "read", object: "content:notes", location: ["10.0.0.0/8"], filter: ['{"public":true}'] },
		{ subject: "@editor@root.local", action: "read", object: "content:posts" },
		{ subject: "@editor@root.local", action: "manage", object: "identity:users" },
	];
	const services = ["content", "identity", "logistic", "touch", "special", "financial", "career"];
	const cols = ["notes", "posts", "users", "vehicles", "emails", "files", "invoices"];
	for (let i = 0; grants.length < total; i++) {
		const subject = i % 10 === 0 ? "@editor@root.local" : `@role${i % 997}@root.local`;
		grants.push({ subject, action: ["read", "write", "manage", "send"][i % 4], object: `${services[i % 7]}:${cols[(i * 3) % 7]}${i % 50}` });
	}
	return grants;
}
