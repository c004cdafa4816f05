/**
 * What every field of the catalog means, with an example value: the OpenAPI document (lib/openapi/) shows both.
 * Kept apart from the collection definitions so that the shapes stay readable; a description written on the field
 * itself wins. test/unit/field-docs.test.ts fails on a field of any collection that has neither.
 *
 * Keys: `service/collection.field`, or `*.field` for the common fields of every document.
 */
import type { DomainDef, FieldDef } from "./types";

const ID = "65f1c0a2b3c4d5e6f7a8b9c0";
const ID2 = "65f1c0a2b3c4d5e6f7a8b9c1";
const DATE = "2026-01-15T09:30:00.000Z";

type Doc = readonly [description: string, example?: unknown];

export const FIELD_DOCS: Record<string, Doc> = {
	// Common fields (spec "Common fields")
	"*.id": ["Document identifier (24-hex object id)", ID],
	"*.owner": ["Id of the owning user (`uid`), app (`aid`) or client (`cid`): the identity of the token that created it", ID],
	"*.clients": ["OAuth clients that see the document: the creating token's `cid` first (the tenant), then the coworkers registered on that client", [ID2]],
	"*.created_at": ["When the document was created (set by the platform)", DATE],
	"*.created_by": ["Id of the identity (user, app or client) that created the document", ID],
	"*.created_in": ["Id of the OAuth client through which the document was created", ID2],
	"*.updated_at": ["When the document last changed (set by the platform)", DATE],
	"*.updated_by": ["Id of the identity that last changed the document", ID],
	"*.updated_in": ["Id of the OAuth client through which the document last changed", ID2],
	"*.deleted_at": ["When the document was soft-deleted; null while the document is live", null],
	"*.deleted_by": ["Id of the identity that soft-deleted the document; null while live", null],
	"*.deleted_in": ["Id of the OAuth client through which the document was soft-deleted; null while live", null],
	"*.restored_at": ["When a soft-deleted document was last restored; null if never", null],
	"*.restored_by": ["Id of the identity that last restored the document", null],
	"*.restored_in": ["Id of the OAuth client through which the document was last restored", null],
	"*.rand": [
		'Random value set at creation: 12 random bytes as base64url (16 characters), for sampling and random ordering (`pagination: {"sort": {"rand": 1}}`)',
		"LLR3AyjCXVBdUdbs",
	],
	"*.timestamp": ["Unix milliseconds, as decimal text, of the document's creation (special/files and special/stats: of its last change), a stable ordering key", "1768469400000"],
	"*.ref": ["Unique human-readable reference within the tenant (409 `ref already exists` on a duplicate)", "INV-2026-0001"],
	"*.shares": ["Ids of users of the caller's tenant who see the document in the `share` zone", [ID]],
	"*.groups": ["Group names (an email or an FQDN) whose members see the document in the `group` zone", ["team@example.com"]],
	"*.identity": ["Polymorphic single relation: the id of any document", ID],
	"*.relations": ["Polymorphic relations: ids of any documents", [ID, ID2]],
	"*.description": ["Free text summary; searched by text queries", "Quarterly report draft"],
	"*.version": ["Document version (SemVer); 1.0.0 when not given", "1.0.0"],
	"*.tags": ["Free-form labels", ["draft", "q1"]],
	"*.props": ["Free-form extra properties (any JSON object)", { color: "blue" }],

	// auth
	"auth/apts.name": ["A label for the personal token", "ci deploy"],
	"auth/apts.token": ["SHA-256 of the APT; the token itself is returned only on creation"],
	"auth/apts.claims": ["Claims the APT carries (copied from the creating token, narrowed by scopes and subjects)"],
	"auth/apts.scopes": ["Scopes of the APT: a subset of the creating token's (`{action}:{service}:{collection?}` or `whole`); all of them when omitted", ["read:content"]],
	"auth/apts.subjects": ["Grant subjects of the APT: a subset of the creating token's subjects; all of them when omitted", ["@editor@acme.example"]],
	"auth/apts.strict": ["True: every request with the APT needs the `x-api-key` header (a strict token makes strict APTs only)", false],
	"auth/apts.expires_at": ["Expiry in Unix milliseconds", 1798761600000],
	"auth/apts.coworkers": ["Coworker client ids the APT acts for; only those registered on the caller's client are kept", [ID2]],
	"auth/apts.session": ["The APT's own session (revoked with it)"],
	"auth/grants.subject": [
		"Whom the grant is for; always with a registered domain: `@role@domain` (users carrying the role), `<uid|aid|cid>@domain` (one user, app or client: a client's own identity is `<cid>@<domain>`), `<username>@domain`, or a group `<group>@domain` (`team@example.com@domain`, `eng.example.com@domain`). A non-operator may name only its client's domains",
		"@editor@acme.example",
	],
	"auth/grants.action": ["What the grant allows: `read`, `write`, `manage` (implies both) or a special action name (`send`, `upload`, ...)", "read"],
	"auth/grants.object": ["Where: `service:collection`, or `service:*` for every collection of the service; must exist in the catalog", "content:notes"],
	"auth/grants.field": ["Field allowlist: only these fields are returned and writable under this grant; all when omitted", ["title", "content"]],
	"auth/grants.filter": [
		"Row filters: JSON texts in the query notation, ANDed with every query under this grant; `{{token.<claim>}}` is replaced by the caller's claim",
		['{"owner":"{{token.uid}}"}'],
	],
	"auth/grants.location": ["IP addresses or CIDR ranges the request must come from; anywhere when omitted", ["10.0.0.0/8"]],
	"auth/grants.time": [
		"Windows when the grant applies: `[{ cron_exp, duration }]` (cron in the token's `tz`, duration in seconds); several combine with OR",
		[{ cron_exp: "0 9 * * 1-5", duration: 28800 }],
	],

	// domain
	"domain/apps.name": ["A label for the application", "mobile app"],
	"domain/apps.client": ["The OAuth client the application acts under", ID2],
	"domain/apps.scopes": ["Scopes of the app's tokens: at most its client's", ["read:content"]],
	"domain/apps.status": ["INACTIVE apps cannot obtain tokens", "ACTIVE"],
	"domain/clients.name": ["A label for the client (tenant)", "Acme"],
	"domain/clients.secret": ["client_secret; generated and returned once when not given", "s3cret-value-from-a-vault"],
	"domain/clients.scopes": [
		"The most its tokens may carry (`{action}:{service}:{collection?}` or `whole`); a token request may narrow them",
		["read:content", "write:content:notes", "manage:identity:users"],
	],
	"domain/clients.domains": [
		"Domain names the client registers (each belongs to one client); the first is the default domain of its tokens. Grant subjects name them",
		["acme.example"],
	],
	"domain/clients.grant_types": ["Token grants the client may use (all when omitted)", ["password", "refresh_token", "client_credential"]],
	"domain/clients.coworkers": ["Ids of other clients that see the documents this client creates (added to their `clients`), and whose users may log in here", [ID2]],
	"domain/clients.access_token_ttl": ["Lifetime of its access tokens, in seconds", 3600],
	"domain/clients.refresh_token_ttl": ["Lifetime of its refresh tokens, in seconds", 2592000],
	"domain/clients.status": ["INACTIVE clients cannot obtain tokens", "ACTIVE"],
	"domain/clients.operator": ["True for the seeded root client only: the operator's tenant"],

	// context
	"context/configs.key": ["`CQRS` (change webhook: docs/webhooks.md), `RBAC` (roles and permissions expanded into grants) or an application key", "CQRS"],
	"context/configs.eid": ["Id of the owning client: the caller's client (filled in when omitted); another client's only for the operator", ID2],
	"context/configs.value": [
		"The configuration: for CQRS `{ url, collections, secret? }`, for RBAC `[{ domain, roles, permissions }]`; any JSON for other keys",
		{ url: "https://hooks.acme.example/platform", collections: ["content/notes"] },
	],
	"context/settings.key": ["Preference name", "theme"],
	"context/settings.value": ["Preference value (any JSON)", "dark"],

	// essential
	"essential/sagas.ttl": ["Lifetime in seconds", 60],
	"essential/sagas.job": ["UUID of the saga's job (set by `start`)", "3f2b8c1e-6d4a-4f7e-9a51-2c0d8e7b6a10"],
	"essential/sagas.state": ["AWAITING until commit, abort or expiry", "AWAITING"],
	"essential/sagas.session": ["The saga's session: send it as `x-saga-session` to stage writes in the saga", "a1b2c3d4e5f60718293a4b5c6d7e8f90"],
	"essential/sagas.expires_at": ["When the saga is compensated if still AWAITING (start + ttl)", DATE],
	"essential/sagas.committed_at": ["When the saga was committed", DATE],
	"essential/sagas.aborted_at": ["When the saga was aborted", DATE],
	"essential/sagas.abort_reason": ["Why it was aborted: `abort` (a caller) or `expiry` (the watcher)", "abort"],
	"essential/saga-stages.saga": ["The saga of this stage", ID],
	"essential/saga-stages.bucket": ["Target collection `service/collection`", "content/notes"],
	"essential/saga-stages.action": ["The store operation the stage performed", "INSERT_MANY"],
	"essential/saga-stages.req": ["The operation's request (query, documents or changes)", { docs: [{ title: "x" }] }],
	"essential/saga-stages.res": ["The operation's answer", { ids: [ID] }],
	"essential/saga-stages.state": ["`pending` (recorded before the write), `done`, `compensated`, `conflict`, or `external` (an `add`)", "done"],
	"essential/saga-stages.conflict": ["Compensation left a document alone: someone else changed it after the stage", false],
	"essential/saga-stages.compensated_at": ["When the stage was undone", DATE],
	"essential/saga-stages.images": ["What compensation needs (ids, before- and after-images, balance moves): never returned"],
	"essential/saga-stages.seq": ["Order of the stage in its saga (compensation runs newest first)"],

	// financial
	"financial/accounts.name": ["Account name", "Operating account"],
	"financial/accounts.type": ["Account type (free text)", "checking"],
	"financial/accounts.currency": ["Currency code", "EUR"],
	"financial/wallets.user": ["The user owning the wallet", ID],
	"financial/wallets.currency": ["Currency code", "EUR"],
	"financial/wallets.balance": ["Minor units (cents); set by the platform only, never below zero", 12500],
	"financial/wallets.saga_ops": ["Balance moves of sagas in flight (`<stage>:<n>`): each is undone at most once"],
	"financial/invoices.amount": ["Minor units (cents)", 4999],
	"financial/invoices.currency": ["Currency code", "EUR"],
	"financial/invoices.status": ["DRAFT, ISSUED, PAID (set by `payment`) or CANCELLED", "ISSUED"],
	"financial/invoices.account": ["The account the invoice is issued from", ID],
	"financial/invoices.paid_at": ["When `payment` paid it", DATE],
	"financial/invoices.transaction": ["The transaction that paid it", ID2],
	"financial/transactions.amount": ["Minor units (cents)", 2500],
	"financial/transactions.currency": ["Currency code", "EUR"],
	"financial/transactions.saga": ["The saga that moves the balances", ID],
	"financial/transactions.wallet": ["The wallet the transaction concerns", ID2],
	"financial/transactions.type": ["TRANSFER, DEPOSIT (payees only) or WITHDRAW (payers only)", "TRANSFER"],
	"financial/transactions.payers": ["`[{ wallet, amount }]`", [{ wallet: ID, amount: 2500 }]],
	"financial/transactions.payees": ["`[{ wallet, amount }]`", [{ wallet: ID2, amount: 2500 }]],
	"financial/transactions.state": ["PENDING until verify, abort or the saga's expiry", "PENDING"],
	"financial/transactions.verified_at": ["When it was verified", DATE],
	"financial/transactions.canceled_at": ["When it was cancelled (balances restored)", DATE],
	"financial/transactions.failed_at": ["When it failed", DATE],
	"financial/currencies.code": ["ISO 4217 code", "EUR"],
	"financial/currencies.name": ["Currency name", "Euro"],
	"financial/currencies.symbol": ["Symbol", "€"],

	// general
	"general/activities.action": ["What happened", "login"],
	"general/activities.subject": ["Who or what it concerns", ID],
	"general/activities.data": ["Details (any JSON object)", { ip: "192.0.2.10" }],
	"general/artifacts.name": ["Artifact name", "build-42.zip"],
	"general/artifacts.content": ["Artifact content (any JSON)", { size: 1024 }],
	"general/comments.content": ["Comment text", "Looks good to me"],
	"general/comments.target": ["Id of the commented document", ID],
	"general/events.title": ["Event title", "Sprint review"],
	"general/events.start_at": ["Start time", DATE],
	"general/events.end_at": ["End time", "2026-01-15T10:30:00.000Z"],
	"general/workflows.name": ["Workflow name", "Invoice approval"],
	"general/workflows.steps": ["Steps (any JSON objects)", [{ name: "review" }]],

	// identity
	"identity/users.username": ["Login name, unique within the tenant: `^[a-z0-9][a-z0-9._-]{2,63}$`, never 24 hex digits", "alice"],
	"identity/users.email": ["Login email, unique within the tenant (compared lower-cased)", "alice@acme.example"],
	"identity/users.phone": ["Login phone (E.164), unique within the tenant", "+15551230001"],
	"identity/users.password": ["Password; stored as an Argon2id hash, never returned", "Alice-Pass-123!"],
	"identity/users.subjects": [
		"Roles (`@editor`) and group names (`team@example.com`, `eng.example.com`), without domain suffix: a token carries them as `@editor@<domain>`, `team@example.com@<domain>`",
		["@editor", "team@example.com"],
	],
	"identity/users.status": ["INACTIVE users cannot log in", "ACTIVE"],
	"identity/profiles.user": ["The user of the profile", ID],
	"identity/profiles.first_name": ["First name", "Alice"],
	"identity/profiles.last_name": ["Last name", "Liddell"],
	"identity/profiles.avatar": ["Avatar image", ID2],
	"identity/sessions.ip": ["IP address of the login", "192.0.2.10"],
	"identity/sessions.agent": ["User-Agent of the login", "curl/8.5.0"],
	"identity/sessions.expiration": ["When the session (its refresh token) expires", DATE],
	"identity/sessions.uid": ["User of the session (absent for client and app tokens)", ID],
	"identity/sessions.cid": ["Client of the session", ID2],
	"identity/sessions.aid": ["App of the session, if any", ID],
	"identity/sessions.domain": ["Domain of the session's tokens", "acme.example"],
	"identity/sessions.refresh": ["Hash of the current refresh token id"],

	// special
	"special/files.name": ["File name", "report.pdf"],
	"special/files.mimetype": ["Media type", "application/pdf"],
	"special/files.size": ["Size in bytes", 48213],
	"special/files.sha256": ["SHA-256 of the content (hex); also the download ETag", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"],
	"special/files.storage": ["Internal storage key"],
	"special/stats.service": ["Service counted", "content"],
	"special/stats.collection": ["Collection counted", "notes"],
	"special/stats.period": ["Length of the bucket", "daily"],
	"special/stats.bucket": ["Start of the period (`YYYY-MM-DD`, `YYYY-MM` or `YYYY`)", "2026-01-15"],
	"special/stats.created": ["Documents created in the period", 12],
	"special/stats.updated": ["Documents updated in the period", 30],
	"special/stats.deleted": ["Documents soft-deleted in the period", 2],
	"special/stats.restored": ["Documents restored in the period", 1],
	"special/stats.seqs": ["Stream positions of the latest change events counted (redelivery guard)"],

	// touch
	"touch/emails.provider": ["Delivery provider", "nodemailer"],
	"touch/emails.to": ["Recipients", ["bob@acme.example"]],
	"touch/emails.from": ["Sender address", "Acme <no-reply@acme.example>"],
	"touch/emails.subject": ["Subject line", "Your invoice"],
	"touch/emails.html": ["HTML body", "<p>Hello</p>"],
	"touch/emails.text": ["Plain-text body", "Hello"],
	"touch/emails.cc": ["Copy recipients", ["carol@acme.example"]],
	"touch/emails.bcc": ["Blind copy recipients", ["audit@acme.example"]],
	"touch/emails.reply_to": ["Reply-To addresses", ["support@acme.example"]],
	"touch/emails.date": ["Scheduled send time; now when omitted", DATE],
	"touch/emails.attachments": ["Attached files", [ID]],
	"touch/emails.smtp": ["Delivery metadata: message_id, accepted, rejected, response", { message_id: "<1@acme.example>", accepted: ["bob@acme.example"] }],
	"touch/emails.state": ["Delivery state (docs/communications.md)", "SENT"],
	"touch/emails.sent_at": ["When it was delivered", DATE],
	"touch/emails.attempts": ["Delivery attempts made so far", 1],
	"touch/emails.next_at": ["When the next delivery attempt is due", DATE],
	"touch/emails.reason": ["Why the last attempt failed (`no transport`, provider answer)", "no transport"],
	"touch/emails.lease": ["Delivery worker's lease (internal)"],
	"touch/emails.lease_until": ["End of the delivery worker's lease (internal)"],
	"touch/notices.type": ["Kind of notice", "INFO"],
	"touch/notices.title": ["Title", "Invoice paid"],
	"touch/notices.content": ["Text", "Invoice INV-2026-0001 was paid."],
	"touch/notices.subtitle": ["Subtitle", "Payments"],
	"touch/notices.category": ["Category (free text)", "billing"],
	"touch/notices.visited": ["True once the recipient has seen it", false],
	"touch/notices.thumbnail": ["Thumbnail image", ID],
	"touch/notices.attachments": ["Attached files", [ID]],
	"touch/notices.actions": ["Actions offered with the notice (any JSON objects)", [{ label: "Open", url: "https://acme.example/invoices/1" }]],
	"touch/pushes.session": ["The login session the subscription belongs to", ID],
	"touch/pushes.keys": ["The subscription's `{ p256dh, auth }` keys; sealed, never returned", { p256dh: "BPx...", auth: "k3y..." }],
	"touch/pushes.endpoint": ["The push service URL of the subscription", "https://push.example.net/send/abc123"],
	"touch/pushes.expiration": ["Expiry of the subscription in Unix milliseconds (0: none)", 0],
	"touch/smss.provider": ["SMS provider", "twilio"],
	"touch/smss.message": ["Message text", "Your code is 123456"],
	"touch/smss.receptors": ["Recipients (E.164)", ["+15551230002"]],
	"touch/smss.sender": ["Sender number or name", "+15551230000"],
	"touch/smss.date": ["Scheduled send time (like an email's `date`)", DATE],
	"touch/smss.res": ["The provider's answer (without credentials)", { status: "queued" }],
	"touch/smss.template": ["Name of the SMS_TEMPLATE the message was filled from", "otp"],
	"touch/smss.state": ["Delivery state (docs/communications.md)", "SENT"],
	"touch/smss.sent_at": ["When it was delivered", DATE],
	"touch/smss.attempts": ["Delivery attempts made so far", 1],
	"touch/smss.next_at": ["When the next delivery attempt is due", DATE],
	"touch/smss.reason": ["Why the last attempt failed (`no transport`, provider answer)", "no transport"],
	"touch/smss.lease": ["Delivery worker's lease (internal)"],
	"touch/smss.lease_until": ["End of the delivery worker's lease (internal)"],
	"touch/push-histories.to": ["The push subscription", ID],
	"touch/push-histories.status": ["This attempt's outcome (docs/communications.md)", "SENT"],
	"touch/push-histories.res": ["The push service's answer: status and body", { status: 201 }],
	"touch/push-histories.session": ["The session of the subscription", ID2],
	"touch/push-histories.message": ["title, body, url, data", { title: "Hello", body: "World" }],
	"touch/push-histories.attempt": ["1 for the first attempt of a message to this subscription", 1],
	"touch/push-histories.next_at": ["When the next attempt is due", DATE],
	"touch/push-histories.sent_at": ["When it was delivered", DATE],
	"touch/push-histories.reason": ["Why the attempt failed", "410 Gone"],
	"touch/push-histories.lease": ["Delivery worker's lease (internal)"],
	"touch/push-histories.lease_until": ["End of the delivery worker's lease (internal)"],

	// content
	"content/notes.title": ["Title", "Meeting notes"],
	"content/notes.content": ["Body text", "Agreed on the Q1 roadmap."],
	"content/posts.title": ["Title", "Release 1.2"],
	"content/posts.content": ["Body text", "What is new in 1.2 ..."],
	"content/posts.status": ["DRAFT or PUBLISHED", "DRAFT"],
	"content/tickets.title": ["Title", "Cannot log in"],
	"content/tickets.content": ["Body text", "Since this morning the login page answers 401."],
	"content/tickets.status": ["OPEN, PENDING or CLOSED", "OPEN"],

	// logistic
	"logistic/locations.name": ["Location name", "Warehouse North"],
	"logistic/locations.lat": ["Latitude in degrees", 52.52],
	"logistic/locations.lng": ["Longitude in degrees", 13.405],
	"logistic/locations.address": ["Postal address", "1 Harbour Road"],
	"logistic/drivers.name": ["Driver name", "Dana"],
	"logistic/drivers.license": ["Driving licence number", "B-1234567"],
	"logistic/vehicles.name": ["Vehicle name", "Truck 7"],
	"logistic/vehicles.plate": ["Licence plate", "B-XY 123"],
	"logistic/travels.origin": ["Start location", ID],
	"logistic/travels.destination": ["End location", ID2],
	"logistic/travels.driver": ["Driver", ID],
	"logistic/travels.vehicle": ["Vehicle", ID2],
	"logistic/travels.status": ["Progress of the travel", undefined],
	"logistic/cargoes.name": ["Cargo name", "Pallets"],
	"logistic/cargoes.weight": ["Weight in kilograms", 850.5],
	"logistic/cargoes.travel": ["The travel carrying it", ID],

	// conjoint
	"conjoint/accounts.name": ["Account name", "alice"],
	"conjoint/accounts.user": ["The user of the account", ID],
	"conjoint/channels.name": ["Channel name", "general"],
	"conjoint/channels.type": ["DIRECT, GROUP or PUBLIC", "GROUP"],
	"conjoint/contacts.name": ["Contact name", "Bob"],
	"conjoint/contacts.account": ["The contact's account", ID],
	"conjoint/members.channel": ["The channel", ID],
	"conjoint/members.account": ["The member's account", ID2],
	"conjoint/messages.channel": ["The channel", ID],
	"conjoint/messages.content": ["Message text", "Hi all"],

	// career
	"career/businesses.name": ["Business name", "Acme Ltd"],
	"career/branches.name": ["Branch name", "Berlin"],
	"career/branches.business": ["The business", ID],
	"career/employees.name": ["Employee name", "Erin"],
	"career/employees.branch": ["The branch", ID],
	"career/products.name": ["Product name", "Widget"],
	"career/products.price": ["Price", 9.99],
	"career/services.name": ["Service name", "Installation"],
	"career/services.price": ["Price", 49],
	"career/stocks.product": ["The product", ID],
	"career/stocks.quantity": ["Units in stock", 120],
	"career/stocks.store": ["The store", ID2],
	"career/stores.name": ["Store name", "Main street"],
	"career/stores.branch": ["The branch", ID],
	"career/customers.name": ["Customer name", "Frank"],
	"career/customers.email": ["Customer email", "frank@example.com"],

	// thing
	"thing/devices.name": ["Device name", "Thermostat"],
	"thing/devices.serial": ["Serial number", "SN-0042"],
	"thing/sensors.name": ["Sensor name", "Temperature"],
	"thing/sensors.device": ["The device", ID],
	"thing/metrics.sensor": ["The sensor", ID],
	"thing/metrics.value": ["Measured value", 21.5],
	"thing/metrics.at": ["When it was measured", DATE],
};

function document(def: FieldDef, doc: Doc | undefined): FieldDef {
	if (!doc) return def;
	const out: FieldDef = { ...def };
	if (!out.description) out.description = doc[0];
	if (out.example === undefined && doc.length > 1 && doc[1] !== undefined) out.example = doc[1];
	if (out.example === undefined && Array.isArray(def.enum) && def.enum.length) out.example = def.type === "array" ? [def.enum[0]] : def.enum[0];
	return out;
}

/** Fills description and example of every field from FIELD_DOCS (the field's own win); fields stay separate objects. */
export function documentFields(domains: readonly DomainDef[], common: Array<Record<string, FieldDef>>): void {
	for (const fields of common) for (const k of Object.keys(fields)) fields[k] = document(fields[k], FIELD_DOCS[`*.${k}`]);
	for (const d of domains)
		for (const c of d.collections) {
			const fields = c.fields as Record<string, FieldDef>;
			for (const k of Object.keys(fields)) fields[k] = document(fields[k], FIELD_DOCS[`${d.name}/${c.name}.${k}`]);
		}
}
