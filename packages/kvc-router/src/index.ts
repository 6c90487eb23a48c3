export { RouterError, RouterErrorCode } from './errors/routerError.js'
export {
  ADMIT_HTTP_PATH,
  ADMIT_PATHS,
  ADMIT_PROTOCOL_VERSION,
  ADMIT_REASONS,
  SLO_CLASSES,
  admitRequestJsonSchema,
  admitResponseJsonSchema,
  parseAdmitRequest,
  parseAdmitResponse,
  type AdmitPath,
  type AdmitReason,
  type AdmitRequest,
  type AdmitResponse,
  type SloClass,
} from './admission/contract.js'
