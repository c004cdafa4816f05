/** general: the standard collection pattern on every collection of the domain (catalog/domains/general.ts), and the audit trail (`activities/audit`). */
import type { ServiceSchema } from "moleculer";
import { general } from "../catalog/domains/general";
import { collectionMixin } from "../engine/collection.mixin";
import { audit } from "./general/audit";

const GeneralService: ServiceSchema = { name: "general", mixins: [collectionMixin(general, { activities: { specials: { audit } } })] };

export default GeneralService;
