import { kvcProject } from '../../vitest.shared.js'

export default kvcProject('example-fuzz')
