// Package daytona is the Daytona cloud sandbox backend for rlhost.
package daytona

import (
	_ "github.com/daytonaio/daytona/libs/api-client-go"
	_ "github.com/daytonaio/daytona/libs/sdk-go/pkg/daytona"
	_ "github.com/daytonaio/daytona/libs/toolbox-api-client-go"
)
