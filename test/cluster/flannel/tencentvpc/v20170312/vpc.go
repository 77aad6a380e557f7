// Package v20170312 has the few types and calls of the Tencent Cloud VPC SDK
// that flannel's tencentvpc backend uses; every call fails (see go.mod).
package v20170312

import "errors"

var errUnavailable = errors.New("tencentvpc backend: the Tencent Cloud SDK is not built in")

type Client struct{}

func NewClientWithSecretId(secretID, secretKey, region string) (*Client, error) {
	return nil, errUnavailable
}

type Filter struct {
	Name   *string
	Values []*string
}

type Route struct {
	DestinationCidrBlock, GatewayType, GatewayId, RouteId, RouteType *string
	Enabled                                                          *bool
}

type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

type DescribeRouteTablesRequest struct{ Filters []*Filter }

type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

type DeleteRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

type CreateRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest {
	return &DescribeRouteTablesRequest{}
}
func NewDeleteRoutesRequest() *DeleteRoutesRequest { return &DeleteRoutesRequest{} }
func NewCreateRoutesRequest() *CreateRoutesRequest { return &CreateRoutesRequest{} }

func (c *Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, errUnavailable
}
func (c *Client) DeleteRoutes(*DeleteRoutesRequest) (struct{}, error) {
	return struct{}{}, errUnavailable
}
func (c *Client) CreateRoutes(*CreateRoutesRequest) (struct{}, error) {
	return struct{}{}, errUnavailable
}
