#!/bin/bash
echo stopping
